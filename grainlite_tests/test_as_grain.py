"""``install_as_grain()``, ``GRAINLITE_AS_GRAIN=1`` and ``python -m grainlite run``: ``import
grain`` gives grainlite in fresh interpreters (where ``grain`` is not imported yet), Grain's public
namespaces and the client paths are grainlite's modules, worker processes see the same ``grain``,
and a process that already imported the real Grain is refused."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import grain as real_grain
import pytest

from grainlite import as_grain
from grainlite_tests.support.tfrecord_frames import RECORDS, frame

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]


def _python(
    code: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -c code`` (or, with args, ``python args...``) in a fresh interpreter."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    full_env.pop("GRAINLITE_AS_GRAIN", None)
    full_env.update(env or {})
    command = [sys.executable, *args] if args else [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(
        command, env=full_env, capture_output=True, text=True, timeout=110, cwd=cwd
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_table_covers_every_public_module_of_the_installed_grain():
    public = {"grain"} | {
        info.name
        for info in pkgutil.walk_packages(real_grain.__path__, "grain.")
        if not any(part.startswith("_") for part in info.name.split("."))
        and not info.name.endswith("_test")
        and not info.name.startswith("grain.proto")  # generated protobuf code, no client uses it
    }
    assert public == set(as_grain.PUBLIC_NAMESPACES)


def test_after_install_every_grain_namespace_and_client_path_is_the_grainlite_module():
    out = _ok(
        _python(
            """
            import importlib, json, sys
            import grainlite
            from grainlite import as_grain
            grainlite.install_as_grain()
            grainlite.install_as_grain()  # a second call is a no-op
            import grain
            same = {}
            for name, target in as_grain.PUBLIC_NAMESPACES.items():
                same[name] = importlib.import_module(name) is importlib.import_module(target)
            for name, (target, _) in as_grain.CLIENT_ALIASES.items():
                same[name] = importlib.import_module(name) is importlib.import_module(target)
            import grain.python.experimental as gpe
            from grain._src.python.ipc.shared_memory_array import SharedMemoryArrayMetadata
            print(json.dumps({
                "same": same,
                "active": grain.__grainlite__,
                "dotted": gpe is grainlite.python.experimental,
                "metadata": SharedMemoryArrayMetadata.__module__,
                "real_grain_files": [
                    m.__file__ for m in list(sys.modules.values())
                    if "site-packages/grain/" in (getattr(m, "__file__", "") or "")
                ],
                "env": __import__("os").environ.get("GRAINLITE_AS_GRAIN"),
            }))
            """
        )
    )
    result = json.loads(out)
    assert all(result["same"].values()), result["same"]
    assert result["active"].startswith("grainlite ") and "install_as_grain" in result["active"]
    assert result["dotted"] and result["metadata"] == "grainlite.shm.array"
    assert result["real_grain_files"] == []
    assert result["env"] == "1"


def test_a_grain_path_that_is_not_aliased_is_module_not_found_and_never_a_second_copy():
    out = _ok(
        _python(
            """
            import sys
            import grainlite
            grainlite.install_as_grain()
            for name in ("grain.tensorflow", "grain.dataset.base", "grain._src.python.data_loader",
                         "grain._src.python.shared_memory_array"):
                try:
                    __import__(name)
                except ModuleNotFoundError as error:
                    print(error.name, "does not alias" in str(error))
            print(sorted(n for n in sys.modules if n.startswith("grain.dataset")))
            """
        )
    )
    assert out.split("\n")[:4] == [
        "grain.tensorflow True",
        "grain.dataset True",  # the parent package is the first name that is not aliased
        "grain._src.python.data_loader True",
        "grain._src.python.shared_memory_array True",
    ]
    assert out.split("\n")[4] == "[]"


def test_install_is_refused_once_the_real_grain_is_imported():
    result = _python(
        """
        import grain
        import grainlite
        try:
            grainlite.install_as_grain()
        except RuntimeError as error:
            print(type(error).__name__, error)
        import grain as again
        print(hasattr(again, "__grainlite__"))
        """
    )
    out = _ok(result)
    assert out.startswith("GrainliteRuntimeError install_as_grain(): the real Grain is already")
    assert "before anything imports grain" in out
    assert out.rstrip().endswith("False")


def test_the_environment_variable_installs_at_import_and_a_bad_value_is_an_error():
    code = "import grainlite, grain; print(grain is grainlite, grain.__grainlite__[:9])"
    assert _ok(_python(code, env={"GRAINLITE_AS_GRAIN": "1"})) == "True grainlite\n"
    assert "False" in _ok(_python("import grainlite, grain; print(grain is grainlite)"))
    bad = _python(code, env={"GRAINLITE_AS_GRAIN": "yes"})
    assert bad.returncode != 0
    assert "GRAINLITE_AS_GRAIN='yes': expected 1" in bad.stderr


def test_run_command_runs_the_script_as_main_with_its_arguments_and_workers_see_grainlite(
    tmp_path,
):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import grain  # the library the script and its workers import

            def which(x):
                import grain
                return (x, getattr(grain, "__grainlite__", "the real grain")[:9])

            if __name__ == "__main__":
                options = grain.MultiprocessingOptions(num_workers=2)
                ds = grain.MapDataset.range(4).map(which).to_iter_dataset().mp_prefetch(options)
                print(sys.argv[1:], list(ds))
            """
        )
    )
    out = _ok(_python("", "-m", "grainlite", "run", str(script), "--steps", "3", cwd=tmp_path))
    workers_saw = [(i, "grainlite") for i in range(4)]
    assert out == f"['--steps', '3'] {workers_saw}\n"


MAXTEXT_STYLE = """
import json, sys
if sys.argv[1] == "grainlite":
    import grainlite
    grainlite.install_as_grain()
import grain.python as grain
from grain._src.python.dataset.sources.tfrecord_dataset import (
    _TFRecordDatasetIterator,
    _TFRecordReader,
)
from grain.experimental import TFRecordIterDataset


class OwnFileReader(_TFRecordReader):  # MaxText opens GCS blobs this way
    def __init__(self, path):
        self._reader = open(path, "rb")


class OwnFileIterator(_TFRecordDatasetIterator):
    def __init__(self, path):
        grain.DatasetIterator.__init__(self)
        self._reader = OwnFileReader(path)


class OwnFileDataset(TFRecordIterDataset):
    def __iter__(self):
        return OwnFileIterator(self._path)


iterator = iter(OwnFileDataset(sys.argv[2]).map(len))
first = [next(iterator), next(iterator)]
state = iterator.get_state()
rest = list(iterator)
again = iter(OwnFileDataset(sys.argv[2]).map(len))
again.set_state(state)
print(json.dumps([first, state, rest, list(again)]))
"""


def test_maxtexts_tfrecord_subclasses_read_and_resume_as_under_grain(tmp_path):
    path = tmp_path / "records.tfrecord"
    path.write_bytes(b"".join(frame(record) for record in RECORDS))
    script = tmp_path / "maxtext_style.py"
    script.write_text(MAXTEXT_STYLE)
    ours = json.loads(_ok(_python("", str(script), "grainlite", str(path))))
    theirs = json.loads(_ok(_python("", str(script), "grain", str(path))))
    assert ours == theirs
    assert ours[0] + ours[2] == [len(record) for record in RECORDS]
    assert ours[2] == ours[3]


def test_run_command_runs_a_module_by_name_as_python_m_does(tmp_path):
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys, grain\nprint(__name__, grain.__grainlite__[:9], sys.argv[1:])\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    out = _ok(_python("", "-m", "grainlite", "run", "-m", "trainer", "a", "-b", env=env))
    assert out == "__main__ grainlite ['a', '-b']\n"
