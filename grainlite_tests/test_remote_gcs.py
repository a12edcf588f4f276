"""gs:// paths against a real GCS-compatible server (fake-gcs-server on 127.0.0.1, the
``gcs_server`` fixture): ArrayRecord files, a Parquet file and a converted dataset read from the
bucket are what the same files give from local disk, with the endpoint from
``STORAGE_EMULATOR_HOST`` or ``storage_options``; a missing object is one FileNotFoundError naming
the URL; refused credentials (answered by the fault proxy in front of the server, which checks
none) are one PermissionError naming the URL and the fix.

fake-gcs-server takes no XML API uploads (what obstore writes with), so ``convert`` into a gs://
prefix is not tried here: the inspect tests upload a local conversion with the server's JSON API.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

import grainlite as grain
from grainlite.__main__ import main
from grainlite.errors import RemoteAccessDeniedError, RemoteObjectNotFoundError
from grainlite.sources.remote.config import EMULATOR_TOKEN, split_options
from grainlite_tests.support.convert_helpers import convert
from grainlite_tests.support.fake_gcs import GcsServer
from grainlite_tests.support.fault_proxy import FaultProxy, Faults

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("obstore")

FILES = 3
RECORDS = 200  # per file


def _record(file: int, index: int) -> bytes:
    return f"{file}:{index}:".encode() + bytes([1 + index % 250]) * (20 + 7 * (index % 11))


@pytest.fixture(scope="module")
def data(gcs_server: GcsServer, tmp_path_factory: pytest.TempPathFactory):
    """Three ArrayRecord files written locally and uploaded: (local paths, their URLs, server)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    folder = tmp_path_factory.mktemp("local")
    paths, urls = [], []
    for file in range(FILES):
        path = folder / f"part-{file}.array_record"
        writer = ArrayRecordWriter(str(path), "group_size:1")
        for index in range(RECORDS):
            writer.write(_record(file, index))
        writer.close()
        gcs_server.put_file(path, f"data/{path.name}")
        paths.append(str(path))
        urls.append(gcs_server.url(f"data/{path.name}"))
    return paths, urls, gcs_server


@pytest.fixture
def emulator(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> GcsServer:
    """The server named by STORAGE_EMULATOR_HOST, as Google's client libraries expect it."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint_url)
    return gcs_server


def _host_only(server: GcsServer) -> str:
    return server.endpoint_url.removeprefix("http://")


@pytest.mark.parametrize("form", ["url", "host_and_port"])
def test_an_array_record_file_read_through_storage_emulator_host_is_byte_identical(
    data, tmp_path, monkeypatch, form
):
    paths, urls, server = data
    host = server.endpoint_url if form == "url" else _host_only(server)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
    local = grain.ArrayRecordDataSource(paths[1])
    remote = grain.ArrayRecordDataSource(urls[1], cache_dir=tmp_path)
    assert len(remote) == len(local) == RECORDS
    assert [remote[i] for i in range(RECORDS)] == [local[i] for i in range(RECORDS)]
    assert remote[RECORDS - 1] == _record(1, RECORDS - 1)


def test_a_glob_and_a_list_of_gs_urls_give_the_local_records(data, tmp_path):
    paths, urls, server = data
    options = server.storage_options()
    local = grain.ArrayRecordDataSource(paths)
    globbed = grain.ArrayRecordDataSource(
        server.url("data/part-*.array_record"), storage_options=options, cache_dir=tmp_path / "g"
    )
    listed = grain.ArrayRecordDataSource(urls, storage_options=options, cache_dir=tmp_path / "l")
    assert globbed.paths == urls
    assert len(globbed) == len(listed) == len(local) == FILES * RECORDS
    keys = list(range(0, FILES * RECORDS, 3))
    assert globbed.__getitems__(keys) == listed.__getitems__(keys) == local.__getitems__(keys)


def test_a_data_loader_with_two_workers_reads_the_bucket_as_the_local_files(data, tmp_path):
    paths, _, server = data

    def loader(source) -> grain.DataLoader:
        sampler = grain.IndexSampler(
            len(source), grain.NoSharding(), shuffle=True, num_epochs=1, seed=5
        )
        return grain.DataLoader(data_source=source, sampler=sampler, worker_count=2)

    remote = grain.ArrayRecordDataSource(
        server.url("data/part-*.array_record"),
        storage_options=server.storage_options(),
        cache_dir=tmp_path,
    )
    with iter(loader(grain.ArrayRecordDataSource(paths))) as elements:
        expected = [bytes(element) for element in elements]
    with iter(loader(remote)) as elements:
        got = [bytes(element) for element in elements]
    assert len(expected) == FILES * RECORDS
    assert got == expected


def test_a_missing_object_is_one_file_not_found_error_naming_the_url_and_the_variable(
    emulator, tmp_path
):
    url = emulator.url("data/missing.array_record")
    with pytest.raises(RemoteObjectNotFoundError) as caught:
        grain.ArrayRecordDataSource(url, cache_dir=tmp_path)
    assert isinstance(caught.value, FileNotFoundError)
    assert re.fullmatch(
        rf"No object at {re.escape(repr(url))} \(.*not found.*\): check the bucket and the "
        r"key \(list them with grainlite\.sources\.remote\.list_glob\), and that the endpoint is "
        r"the store that holds them \(STORAGE_EMULATOR_HOST or "
        r"storage_options=\{'endpoint_url': \.\.\.\}\)\.",
        str(caught.value),
    ), str(caught.value)


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("form", ["file", "glob"])
def test_refused_credentials_are_one_permission_error_naming_the_url_and_the_fix(
    data, tmp_path, monkeypatch, status, form
):
    # The emulator checks no credentials, so the fault proxy in front of it answers every
    # request as a server that refuses them does (401: no valid credentials; 403: no access).
    _paths, urls, server = data
    host, port = server.endpoint_url.removeprefix("http://").split(":")
    url = urls[0] if form == "file" else urls[0].rsplit("/", 1)[0] + "/part-*.array_record"
    with FaultProxy((host, int(port)), Faults(refuse_status=status)) as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.endpoint_url)
        began = time.monotonic()
        with pytest.raises(RemoteAccessDeniedError) as caught:
            grain.ArrayRecordDataSource(url, cache_dir=tmp_path)
        took = time.monotonic() - began
        assert proxy.counts()["refusals"] >= 1
    assert isinstance(caught.value, PermissionError)
    message = str(caught.value)
    assert message.startswith(f"Object storage refused the credentials for {url!r} ("), message
    assert "application default credentials for gs://" in message
    assert "storage_options" in message
    assert took < 10, f"a refusal took {took:.1f} s (it is not retried)"


def test_a_parquet_file_in_a_bucket_reads_as_the_local_file(emulator, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    local = tmp_path / "rows.parquet"
    table = pa.table({"id": list(range(30)), "text": [f"row {i}" for i in range(30)]})
    pq.write_table(table, local, row_group_size=8)
    key = f"t-{uuid.uuid4().hex[:8]}/rows.parquet"
    emulator.put_file(local, key)
    remote = list(grain.experimental.ParquetIterDataset(emulator.url(key)))
    assert [(int(r["id"]), r["text"]) for r in remote] == [(i, f"row {i}") for i in range(30)]


def test_inspect_verifies_a_conversion_in_a_bucket_and_catches_a_changed_shard(
    emulator, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("GRAINLITE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "data.jsonl"
    source.write_text("".join(f'{{"id": {i}, "name": "n{i}"}}\n' for i in range(30)))
    assert convert(source, tmp_path / "local", "--num-shards", "2") == 0
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    for path in sorted((tmp_path / "local").iterdir()):
        emulator.put_file(path, f"{prefix}/{path.name}")
    capsys.readouterr()
    assert main(["inspect", emulator.url(prefix), "--verify", "--records", "2"]) == 0
    out = capsys.readouterr().out
    assert f"manifest: {emulator.url(prefix)}/data-train.manifest.json\n" in out
    assert "dataset: data split train: 30 records in 2 shard(s)" in out
    assert "  [1] id: int64 1; name: str 'n1'" in out
    assert "verify: OK, 30 records match the manifest\n" in out
    shard = f"{prefix}/data-train.array_record-00001-of-00002"
    changed = bytearray(emulator.get(shard))
    changed[len(changed) // 2] ^= 0xFF  # same size, other content
    emulator.put(shard, bytes(changed))
    assert main(["inspect", emulator.url(prefix), "--verify", "--records", "0"]) == 1
    assert "verify: FAILED" in capsys.readouterr().out


# -- where the settings come from (config.py's rule; no request) ----------------------------------


def test_the_endpoint_in_storage_options_wins_over_storage_emulator_host(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:1")
    spec = split_options("gs", {"endpoint_url": "http://127.0.0.1:2/", "anon": True})
    assert spec.config == {"base_url": "http://127.0.0.1:2", "skip_signature": True}
    assert spec.client == {"allow_http": True}


def test_storage_emulator_host_sends_a_placeholder_token_unless_credentials_are_given(
    monkeypatch,
):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "localhost:4443")
    plain = split_options("gs", None)
    assert plain.config == {"base_url": "http://localhost:4443", "bearer_token": EMULATOR_TOKEN}
    assert plain.client == {"allow_http": True}
    own = split_options("gs", {"google_service_account": "/keys/sa.json"})
    assert own.config == {
        "base_url": "http://localhost:4443",
        "google_service_account": "/keys/sa.json",
    }
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    assert split_options("gs", None).config == {}
