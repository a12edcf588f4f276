"""What a remote URL names, and how to reach it: the bucket and key, the store's settings, retries.

An ``s3://bucket/key`` or ``gs://bucket/key`` URL names one object. Where the store is and who
asks come from the standard places, with no code change: for S3 and S3-compatible stores
(MinIO, SeaweedFS, R2) ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, a profile (``AWS_PROFILE``, read
with boto3 when it is installed) and instance metadata; for GCS Google's application default
credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's login, the metadata server), and
``STORAGE_EMULATOR_HOST`` for an emulator (fake-gcs-server), as Google's client libraries read it.

``storage_options`` (a dict) overrides them per call. Its keys are obstore's store settings
(``endpoint``, ``access_key_id``, ``secret_access_key``, ``session_token``, ``region``,
``skip_signature`` ...; for GCS ``base_url``, ``service_account_path``, ``bearer_token`` ...), the
fsspec spellings users know (``endpoint_url``, ``key``, ``secret``, ``token``, ``region_name``,
``anon``), ``profile``, and grainlite's request settings (:class:`RequestOptions`):
``max_retries``, ``timeout``, ``connect_timeout``, ``backoff``, ``max_backoff``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError

SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs"}
"""URL schemes read from object storage, and the store each names."""

# fsspec / s3fs spellings -> obstore's.
_ALIASES = {
    "endpoint_url": "endpoint",
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "region_name": "region",
}


def is_remote(path: Any) -> bool:
    """Whether ``path`` is an object-storage URL (``s3://``, ``gs://`` or ``gcs://``)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        return False
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


@dataclass(frozen=True)
class Location:
    """One object: ``scheme`` (``"s3"`` or ``"gs"``), ``bucket`` and ``key`` (may be empty)."""

    scheme: str
    bucket: str
    key: str

    @property
    def url(self) -> str:
        """The URL naming this object."""
        return f"{self.scheme}://{self.bucket}/{self.key}"


def parse_url(url: Any) -> Location:
    """The :class:`Location` an ``s3://`` or ``gs://`` URL names; an error for anything else."""
    text = os.fspath(url) if isinstance(url, os.PathLike) else url
    if not is_remote(text):
        raise GrainliteValueError(
            f"Not an object-storage URL: {text!r}; pass 's3://bucket/key' or 'gs://bucket/key'."
        )
    scheme, _, rest = text.partition("://")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise GrainliteValueError(
            f"The URL {text!r} names no bucket; pass '{scheme}://BUCKET/path/to/object'."
        )
    return Location(SCHEMES[scheme.lower()], bucket, key)


@dataclass(frozen=True)
class RequestOptions:
    """How requests are retried and bounded (``storage_options`` keys of the same names).

    A request that fails with a reset connection, a 5xx answer (``503 SlowDown`` included), a
    ``429`` or a timeout is tried again up to ``max_retries`` times, after
    ``backoff * 2**attempt`` seconds (at most ``max_backoff``) with full jitter; ``timeout``
    bounds a whole request (a stalled one is cancelled and retried), ``connect_timeout`` the
    connection. A missing object, refused credentials and another 4xx answer (the request itself
    refused, e.g. ``400 Bad Request``) are never retried.
    """

    max_retries: int = 8
    timeout: float = 30.0
    connect_timeout: float = 5.0
    backoff: float = 0.1
    max_backoff: float = 10.0


_REQUEST_KEYS = set(RequestOptions.__dataclass_fields__)
# obstore's HTTP client settings (its ``client_options``), given among the storage options.
_CLIENT_KEYS = {
    "allow_http",
    "allow_invalid_certificates",
    "default_headers",
    "http1_only",
    "http2_only",
    "pool_idle_timeout",
    "pool_max_idle_per_host",
    "proxy_url",
    "proxy_ca_certificate",
    "proxy_excludes",
    "randomize_addresses",
    "root_certificate",
    "user_agent",
}


@dataclass(frozen=True)
class StoreSpec:
    """Everything a store of one bucket is made from: obstore's ``config`` and
    ``client_options``, the request options and an AWS profile (None: none)."""

    config: dict[str, Any]
    client: dict[str, Any]
    request: RequestOptions
    profile: str | None

    def key(self) -> str:
        """A text identifying the store these settings make (for the per-process store table)."""
        return repr(
            (sorted(self.config.items()), sorted(self.client.items()), self.request, self.profile)
        )


def split_options(scheme: str, storage_options: dict[str, Any] | None) -> StoreSpec:
    """``storage_options`` (and the environment) as the settings of a store for ``scheme``."""
    if storage_options is None:
        storage_options = {}
    if not isinstance(storage_options, dict):
        raise GrainliteTypeError(
            f"storage_options must be a dict (got {type(storage_options).__name__} "
            f"{storage_options!r:.200}); pass e.g. {{'endpoint_url': 'http://127.0.0.1:9000'}}."
        )
    store: dict[str, Any] = {}
    client: dict[str, Any] = {}
    request: dict[str, float] = {}
    profile = None
    for key, value in storage_options.items():
        if key in _REQUEST_KEYS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise GrainliteValueError(
                    f"storage_options[{key!r}] must be a number >= 0 (got {value!r:.200}); pass "
                    f"e.g. {{{key!r}: {getattr(RequestOptions, key)!r}}}."
                )
            request[key] = int(value) if key == "max_retries" else float(value)
        elif key == "profile":
            profile = str(value)
        elif key in _CLIENT_KEYS:
            client[key] = value
        elif key == "anon":
            store["skip_signature"] = bool(value)
        else:
            store[_ALIASES.get(key, key)] = value
    if scheme == "s3":
        if (
            profile is None
            and "access_key_id" not in store
            and "AWS_ACCESS_KEY_ID" not in os.environ
        ):
            profile = os.environ.get("AWS_PROFILE") or None
        endpoint = (
            store.get("endpoint")
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        if endpoint and str(endpoint).startswith("http://"):
            client.setdefault("allow_http", True)
    else:
        _gcs_endpoint(store, client)
    return StoreSpec(store, client, RequestOptions(**request), profile)  # type: ignore[arg-type]


# GCS credential settings (also spelled with a google_ prefix): a user who gives one of these chose
# the credentials, even for an emulator.
_GCS_CREDENTIALS = {
    "application_credentials",
    "bearer_token",
    "service_account",
    "service_account_key",
    "service_account_path",
    "skip_signature",
}
EMULATOR_TOKEN = "grainlite-emulator"
"""The bearer token sent to a GCS emulator named by ``STORAGE_EMULATOR_HOST``: emulators do not
check it, and obstore's anonymous mode (``skip_signature``) still asks the metadata server for a
token to upload with."""


def _gcs_endpoint(store: dict[str, Any], client: dict[str, Any]) -> None:
    """The endpoint of a GCS store, in place: ``storage_options``' ``endpoint_url`` (or
    ``endpoint``, ``base_url``), else the emulator that ``STORAGE_EMULATOR_HOST`` names (as
    Google's client libraries read it; ``host:port`` means ``http://host:port``), which is sent a
    placeholder token unless credentials were given. ``http://`` endpoints are allowed."""
    endpoint = (
        store.pop("endpoint", None) or store.pop("google_base_url", None) or store.get("base_url")
    )
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if not endpoint and emulator:
        endpoint = emulator if "://" in emulator else f"http://{emulator}"
        if not _GCS_CREDENTIALS & {key.removeprefix("google_") for key in store}:
            store["bearer_token"] = EMULATOR_TOKEN
    if not endpoint:
        return
    store["base_url"] = str(endpoint).rstrip("/")
    if store["base_url"].startswith("http://"):
        client.setdefault("allow_http", True)
