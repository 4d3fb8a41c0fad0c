"""The package store's layout without a broker: chunks, the manifest, the checks on read,
the size limit, and the worker's local cache of fetched packages."""

from __future__ import annotations

import hashlib
import multiprocessing
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from pulsar_state.errors import ConfigurationError
from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.metadata_manager import RequestError, validate_config
from pulsar_state.functions.package_cache import PackageCache
from pulsar_state.functions.package_manifest import (
    CHUNK_BYTES,
    MAX_PACKAGE_BYTES,
    PackageCorruptError,
    PackageManifest,
    PackageTooLargeError,
    assemble,
    chunk_key,
    manifest_key,
    package_url,
    parse_package_url,
    split_chunks,
)
from pulsar_state.functions.worker_config import WorkerTopics


def _chunks(data: bytes, size: int) -> dict[int, bytes]:
    return dict(enumerate(split_chunks(data, size)))


def test_chunks_are_under_a_state_write_and_put_back_together() -> None:
    data = bytes(range(256)) * 40_000 + b"tail"  # 10 MB and a bit: 10 chunks + 1
    chunks = split_chunks(data)
    assert all(len(c) <= CHUNK_BYTES for c in chunks)
    assert CHUNK_BYTES * 4 <= 4 * 1024 * 1024  # a quarter of the default max_write_bytes
    manifest = PackageManifest.of(data)
    assert manifest.chunks == len(chunks) == -(-len(data) // CHUNK_BYTES)
    assert manifest.digest == hashlib.sha256(data).hexdigest()
    assert assemble(manifest, dict(enumerate(chunks))) == data
    # an empty package is one empty chunk
    empty = PackageManifest.of(b"")
    assert (empty.chunks, split_chunks(b"")) == (1, [b""])
    assert assemble(empty, {0: b""}) == b""


def test_a_package_of_20_mb_round_trips_through_its_manifest() -> None:
    data = hashlib.sha256(b"seed").digest() * (20 * 1024 * 1024 // 32)
    manifest = PackageManifest.of(data)
    read = PackageManifest.from_bytes(manifest.to_bytes(), manifest.digest)
    assert read == manifest and read.chunks == 20
    assert assemble(read, _chunks(data, CHUNK_BYTES)) == data


def test_keys_and_urls() -> None:
    digest = "ab" * 32
    assert package_url(digest) == f"pss://sha256/{digest}"
    assert parse_package_url(f"pss://sha256/{digest}") == digest
    assert manifest_key(digest) == f"sha256/{digest}"
    assert chunk_key(digest, 3) == f"sha256/{digest}/chunk/3"
    for bad in ("pss://sha256/xyz", "https://x/y.py", f"pss://md5/{digest}", "AB" * 32):
        with pytest.raises(ValueError):
            parse_package_url(bad)


def test_a_missing_altered_or_extra_long_chunk_is_refused() -> None:
    data = b"0123456789" * 10
    manifest = PackageManifest.of(data, 16)
    good = _chunks(data, 16)
    assert assemble(manifest, {**good, 99: b"ignored"}) == data
    missing = dict(good)
    del missing[3]
    with pytest.raises(PackageCorruptError, match=r"chunk\(s\) \[3\].*missing"):
        assemble(manifest, missing)
    with pytest.raises(PackageCorruptError, match="digest mismatch"):
        assemble(manifest, {**good, 2: b"X" * 16})
    with pytest.raises(PackageCorruptError, match="chunk 2 is 15 bytes"):
        assemble(manifest, {**good, 2: b"X" * 15})
    with pytest.raises(PackageCorruptError):
        assemble(manifest, {**good, manifest.chunks - 1: good[manifest.chunks - 1] + b"!"})


def test_a_manifest_that_does_not_add_up_is_refused() -> None:
    manifest = PackageManifest.of(b"abc" * 100, 16)
    with pytest.raises(PackageCorruptError, match="does not add up"):
        PackageManifest.from_bytes(manifest.to_bytes(), "cd" * 32)  # another digest
    wrong = PackageManifest(manifest.digest, manifest.size, manifest.chunks + 1, 16)
    with pytest.raises(PackageCorruptError, match="does not add up"):
        PackageManifest.from_bytes(wrong.to_bytes(), manifest.digest)
    with pytest.raises(PackageCorruptError, match="unreadable"):
        PackageManifest.from_bytes(b"{not json", manifest.digest)


def test_a_file_over_the_limit_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    big = tmp_path / "big.zip"
    with big.open("wb") as out:
        out.truncate(MAX_PACKAGE_BYTES + 1)  # sparse: nothing to read

    class NoClient:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the broker was used ({name})")

    admin = FunctionAdmin(NoClient(), WorkerTopics.of("g"))  # type: ignore[arg-type]
    with pytest.raises(PackageTooLargeError, match="over the package store's limit"):
        admin.create("public/default/f", {"py": str(big), "className": "m.F", "inputs": ["t"]})
    with pytest.raises(ConfigurationError, match="cannot read"):
        admin.upload(tmp_path / "absent.py")
    with pytest.raises(ConfigurationError, match=r"\.py file or a \.zip"):
        admin.upload(tmp_path / "code.txt")
    with pytest.raises(ConfigurationError, match="function://"):
        admin.create("public/default/f", {"py": "function://p/n/f@1", "className": "m.F"})
    # file:// and http(s) URLs, and a config naming a package, are recorded as given
    for kept in ({"py": "file:///shared/x.py"}, {"py": "http://h/x.py"}):
        assert admin._with_code(kept) == kept
    named = {"py": "x.py", "package": package_url("ab" * 32)}
    assert admin._with_code(named) == named


def test_records_name_a_package_with_its_file_name() -> None:
    base = {"className": "m.F", "inputs": ["t"]}
    url = package_url("ab" * 32)
    assert validate_config({**base, "py": "m.py", "package": url})["package"] == url
    for bad in (
        {"py": "m.py", "package": "pss://sha256/nothex"},
        {"package": url},
        {"py": "/shared/m.py", "package": url},
        {"py": "m.txt", "package": url},
    ):
        with pytest.raises(RequestError):
            validate_config({**base, **bad})


class FakeStore:
    """A package store in memory that counts its fetches (and may pause them)."""

    def __init__(self, packages: dict[str, bytes], gate: threading.Event | None = None) -> None:
        self.packages = packages
        self.fetches = 0
        self.gate = gate

    def fetch(self, url: str) -> bytes:
        self.fetches += 1
        if self.gate is not None:
            self.gate.wait(10)
        return self.packages[url]


def test_the_cache_fetches_once_checks_every_use_and_survives_a_restart(tmp_path: Path) -> None:
    data = b"class F:\n    def process(self, i, c):\n        return i\n"
    url = package_url(hashlib.sha256(data).hexdigest())
    store = FakeStore({url: data}, gate=threading.Event())
    cache = PackageCache(tmp_path, store)  # type: ignore[arg-type]
    paths: list[str | None] = []
    threads = [
        threading.Thread(target=lambda: paths.append(cache.code_path("m.py", url)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    store.gate.set()  # type: ignore[union-attr]
    for thread in threads:
        thread.join(10)
    assert store.fetches == 1 and len(set(paths)) == 1
    path = Path(str(paths[0]))
    assert path == tmp_path / "sha256" / url.rpartition("/")[2] / "m.py"
    assert path.read_bytes() == data
    assert [p.name for p in path.parent.iterdir()] == ["m.py"]  # no partial file left
    # another name of the same bytes comes from the cache; a restarted worker fetches nothing
    again = PackageCache(tmp_path, FakeStore({}))  # type: ignore[arg-type]
    assert Path(str(again.code_path("n.py", url))).read_bytes() == data
    assert again.fetched == 0
    # a damaged cached file is dropped: made again from a whole copy, else fetched again
    path.write_bytes(b"damaged")
    assert Path(str(cache.code_path("m.py", url))).read_bytes() == data
    assert store.fetches == 1
    for cached in path.parent.iterdir():
        cached.write_bytes(b"damaged")
    assert Path(str(cache.code_path("m.py", url))).read_bytes() == data
    assert store.fetches == 2 and sorted(p.name for p in path.parent.iterdir()) == ["m.py"]
    # no package: the path as given
    assert cache.code_path("/shared/m.py", None) == "/shared/m.py"
    assert cache.code_path(None, None) is None


def test_bytes_that_are_not_their_name_are_refused_and_counted(tmp_path: Path) -> None:
    url = package_url(hashlib.sha256(b"the real code").digest().hex())
    cache = PackageCache(tmp_path, FakeStore({url: b"other code"}))  # type: ignore[arg-type]
    with pytest.raises(PackageCorruptError, match="digest mismatch"):
        cache.code_path("m.py", url)
    assert cache.refused == 1 and cache.fetched == 0
    assert not (tmp_path / "sha256" / url.rpartition("/")[2] / "m.py").exists()


def _fetch_in_process(root: str, url: str, data: bytes, out: Any) -> None:
    cache = PackageCache(Path(root), FakeStore({url: data}))  # type: ignore[arg-type]
    out.put(Path(str(cache.code_path("m.py", url))).read_bytes() == data)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_fetching_into_one_cache_at_once_each_get_the_whole_package(
    tmp_path: Path, method: str
) -> None:
    data = b"x = 1\n" * 200_000
    url = package_url(hashlib.sha256(data).hexdigest())
    context = multiprocessing.get_context(method)
    out = context.Queue()
    processes = [
        context.Process(target=_fetch_in_process, args=(str(tmp_path), url, data, out))
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
    assert results == [True] * 4
    folder = tmp_path / "sha256" / url.rpartition("/")[2]
    assert [p.name for p in folder.iterdir()] == ["m.py"]


def test_a_zip_unpacked_by_another_process_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes sharing a work folder unpack one package at once: the one that
    renames second keeps the first's folder instead of failing."""
    from pulsar_state.functions import function_code  # noqa: PLC0415 - the module under test

    package = tmp_path / "fn.zip"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("fn/src/fn.py", "X = 1\n")
    work = tmp_path / "work"
    work.mkdir()
    real = zipfile.ZipFile.extractall

    def racing(self: zipfile.ZipFile, path: Any = None, *args: Any, **kwargs: Any) -> None:
        real(self, path, *args, **kwargs)
        other = work / "fn-key"
        if not other.exists():  # the other process renames its copy into place first
            real(self, other)

    monkeypatch.setattr(zipfile.ZipFile, "extractall", racing)
    folder = function_code._unpacked(package, work, "key")
    assert folder == work / "fn-key" / "fn" / "src"
    assert (folder / "fn.py").read_text() == "X = 1\n"
    assert [p.name for p in work.iterdir()] == ["fn-key"]  # no partial folder left
