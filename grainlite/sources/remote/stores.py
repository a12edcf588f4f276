"""The stores (obstore's clients) of object storage, and :func:`call`, the one way to ask them.

Every request goes through :func:`call`, the one retry rule: a reset connection, a 5xx answer
(``503 SlowDown`` included), a timeout or a stalled request (bounded by ``timeout``: the client
cancels it) is tried again with exponential backoff and full jitter, at most ``max_retries``
times (:class:`~grainlite.sources.remote.config.RequestOptions`); a missing object or bucket
raises :class:`~grainlite.errors.RemoteObjectNotFoundError` (a ``FileNotFoundError``) and refused
credentials :class:`~grainlite.errors.RemoteAccessDeniedError` (a ``PermissionError``) at once,
each naming the URL and the fix. The client library (obstore) keeps its own retries off, so the
count a user sets is the count made.

Clients are made per process, on first use: a table keyed by the process id, so a process made
by ``os.fork()`` never uses its parent's connections. obstore's runtime does not survive a fork
once used (a request in the child hangs), so such a child gets an error naming the fix instead
of a hang; grainlite's own workers are new interpreters and make their own clients.

The requests themselves are in :mod:`grainlite.sources.remote.objects`, the file objects over
them in :mod:`grainlite.sources.remote.file_objects`.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from grainlite._optional import require
from grainlite.errors import (
    GrainliteRuntimeError,
    GrainliteValueError,
    RemoteAccessDeniedError,
    RemoteObjectNotFoundError,
    RemoteReadError,
)
from grainlite.sources.remote.config import Location, StoreSpec, parse_url, split_options

T = TypeVar("T")

_lock = threading.Lock()
_stores: dict[tuple[int, str, str, str], Any] = {}
_used_in: int | None = None  # the pid that made a client (obstore's runtime started there)
_inherited = False  # this process is a fork of one that had used obstore


def _after_fork_in_child() -> None:
    global _inherited
    if _used_in is not None:
        _inherited = True
    _stores.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def store_of(url: Any, storage_options: dict[str, Any] | None = None) -> tuple[Any, str, StoreSpec]:
    """The client of ``url``'s bucket made in this process, the object's key, and the settings."""
    location = parse_url(url)
    spec = split_options(location.scheme, storage_options)
    return _store(location, spec), location.key, spec


def _store(location: Location, spec: StoreSpec) -> Any:
    global _used_in
    if _inherited:
        raise GrainliteRuntimeError(
            f"Cannot read {location.url!r} in a process made by os.fork() from one that had "
            f"already read object storage: obstore's runtime does not survive a fork (a request "
            f"would hang). Start such processes with multiprocessing's 'spawn' or 'forkserver' "
            f"method, or read the bucket only after the fork."
        )
    key = (os.getpid(), location.scheme, location.bucket, spec.key())
    store = _stores.get(key)
    if store is None:
        with _lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = _make_store(location, spec)
                _used_in = os.getpid()
    return store


def _make_store(location: Location, spec: StoreSpec) -> Any:
    stores = require("obstore.store", "remote", f"Reading {location.scheme}:// URLs")
    client = dict(spec.client)
    client["timeout"] = timedelta(seconds=spec.request.timeout)
    client["connect_timeout"] = timedelta(seconds=spec.request.connect_timeout)
    kwargs: dict[str, Any] = {
        "config": dict(spec.config),
        "client_options": client,
        "retry_config": {"max_retries": 0},  # call() retries, so the count is the user's
    }
    try:
        if location.scheme == "s3":
            if spec.profile is not None:
                boto3 = require("boto3", "remote", f"The AWS profile {spec.profile!r}")
                provider = require("obstore.auth.boto3", "remote", "AWS profiles")
                kwargs["credential_provider"] = provider.Boto3CredentialProvider(
                    boto3.Session(profile_name=spec.profile)
                )
            return stores.S3Store(location.bucket, **kwargs)
        return stores.GCSStore(location.bucket, **kwargs)
    except (ValueError, TypeError, require("obstore.exceptions", "remote", "").BaseError) as error:
        raise GrainliteValueError(
            f"Could not set up a client for {location.url!r} with the storage options "
            f"{sorted(spec.config)!r:.200} ({str(error).splitlines()[0]:.200}); pass obstore's "
            f"setting names (e.g. 'endpoint', 'region', 'access_key_id') or fsspec's "
            f"('endpoint_url', 'key', 'secret')."
        ) from None


class NotRetried(Exception):
    """Raised by a ``request`` given to :func:`call` around an error of its own (not the store's:
    a failed write of what it received), which :func:`call` raises as it is, untried again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def call(what: str, url: str, spec: StoreSpec, request: Callable[[], T]) -> T:
    """``request()``, retried on transient failures; ``what`` names it in errors (``"GET"``)."""
    exceptions = require("obstore.exceptions", "remote", f"Reading {url}")
    options = spec.request
    attempt = 0
    while True:
        try:
            return request()
        except NotRetried as wrapped:
            raise wrapped.error from None
        except FileNotFoundError as error:
            raise not_found_error(url, error) from None
        except (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError) as error:
            raise access_denied_error(url, error) from None
        except (
            exceptions.InvalidPathError,
            exceptions.NotSupportedError,
            exceptions.UnknownConfigurationKeyError,
        ) as error:
            raise GrainliteValueError(
                f"object storage refused the {what} of {url!r}: {first_line(error)}; check the "
                f"URL and the storage options."
            ) from None
        except Exception as error:
            text = str(error)
            if " 403 " in text or " 401 " in text:
                raise access_denied_error(url, error) from None
            rejected = _rejected_status(text)
            if rejected is not None:
                raise GrainliteValueError(
                    f"object storage refused the {what} of {url!r} with {rejected} "
                    f"({first_line(error)}); asking again would be refused again, so it was not "
                    f"retried: check the URL, the storage options and that this store supports "
                    f"the request."
                ) from None
            if attempt >= options.max_retries:
                raise RemoteReadError(
                    f"The {what} of {url!r} failed {attempt + 1} times (last: "
                    f"{first_line(error)}); the store is unreachable or failing. Check the "
                    f"endpoint and the network, or allow more retries with storage_options="
                    f"{{'max_retries': {2 * max(1, options.max_retries)}}}."
                ) from error
            time.sleep(random.uniform(0, min(options.max_backoff, options.backoff * 2**attempt)))
            attempt += 1


# A 4xx answer that a new try cannot change (the request itself is refused): 400 Bad Request,
# 405, 409, 411-416, 422 ... 408 Request Timeout and 429 Too Many Requests are retried; 401, 403
# and 404 have errors of their own.
# obstore says "... status code: 400 Bad Request: <body>"; a text without it is retried as before.
_STATUS = re.compile(r"\bstatus(?: code)?:? (?P<status>(?P<code>4\d\d) [A-Z][A-Za-z' -]*[A-Za-z])")
_RETRIED_4XX = frozenset({"401", "403", "404", "408", "429"})


def _rejected_status(text: str) -> str | None:
    """The status (e.g. ``"400 Bad Request"``) of an answer that refuses the request itself,
    found in obstore's error text; None for any other failure."""
    for found in _STATUS.finditer(text):
        if found["code"] not in _RETRIED_4XX:
            return found["status"]
    return None


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s text (else its type's name), at most 200 characters."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def not_found_error(url: str, error: BaseException) -> RemoteObjectNotFoundError:
    """The error for a missing object at ``url``, naming the endpoint variable to check."""
    variable = "AWS_ENDPOINT_URL" if parse_url(url).scheme == "s3" else "STORAGE_EMULATOR_HOST"
    return RemoteObjectNotFoundError(
        f"No object at {url!r} ({first_line(error)}): check the bucket and the key (list them "
        f"with grainlite.sources.remote.list_glob), and that the endpoint is the store that "
        f"holds them ({variable} or storage_options={{'endpoint_url': ...}})."
    )


def access_denied_error(url: str, error: BaseException) -> RemoteAccessDeniedError:
    """The error for credentials refused for ``url``, naming where credentials come from."""
    return RemoteAccessDeniedError(
        f"Object storage refused the credentials for {url!r} ({first_line(error)}): set "
        f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for s3://, Google's "
        f"application default credentials for gs://, or pass them in storage_options, with "
        f"read access to this bucket."
    )
