"""A worker group's code packages on a topic of its own: :class:`PackageStore`.

Pulsar's functions worker uploads a function's package (to BookKeeper, or its
package management) and each worker downloads it. Here the package goes into
the group's ``<group>-packages`` topic
(:class:`~pulsar_state.functions.worker_config.WorkerTopics`), as
:mod:`~pulsar_state.functions.package_manifest` lays it out: chunks keyed
``sha256/<hex>/chunk/<i>``, **then** the manifest keyed ``sha256/<hex>``, one
producer, batching off, so the manifest lands after every chunk it names.

The topic is a plain keyed topic (compactable: the latest message of a key
wins, as compaction keeps it). :meth:`PackageStore.fetch` reads it from the
start to its end with a reader (no subscription), keeping only the messages
of the digest asked for (the latest of each key), so a fetch holds one
package in memory, not the store; then checks the chunks against the manifest
(:func:`~pulsar_state.functions.package_manifest.assemble`). Packages are
immutable and content-addressed: uploading the same bytes again writes the
same chunks again, harmlessly, and a record can never see another package
under its name.

Nothing is deleted: a package stays when its function is deleted (other
records, or an older version being rolled back to, may name it), as packages
stay in Pulsar's package management until deleted by hand. The topic is
protected (infinite retention, compaction threshold) by
:func:`protect_packages` when an admin endpoint is given.
"""

from __future__ import annotations

import logging
import time

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.config import DEFAULT_COMPACTION_THRESHOLD_BYTES
from pulsar_state.errors import OperationTimeoutError, PulsarStateError
from pulsar_state.functions.package_manifest import (
    CHUNK_BYTES,
    PackageManifest,
    PackageNotFoundError,
    assemble,
    check_size,
    chunk_key,
    manifest_key,
    parse_package_url,
    split_chunks,
)

__all__ = ["PackageStore", "protect_packages"]

log = logging.getLogger(__name__)

#: messages a fetch's reader prefetches (each up to a chunk: bounds its memory)
_READER_QUEUE = 4


def protect_packages(admin: AdminEndpoint, topic: str) -> None:
    """Create the packages topic and give it infinite retention and a compaction
    threshold; a refusal is logged (a role without admin rights), not raised."""
    client = admin.admin(timeout_s=10.0, retry_s=30.0)
    try:
        client.ensure_topic(topic)
        client.protect(topic, compaction_threshold_bytes=DEFAULT_COMPACTION_THRESHOLD_BYTES)
    except PulsarStateError as exc:
        log.warning("the package store %s is not protected: %s", topic, exc)
    finally:
        client.close()


class PackageStore:
    """Upload and fetch code packages on one topic (see the module docstring)."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        timeout_s: float = 120.0,
    ) -> None:
        if chunk_bytes <= 0 or timeout_s <= 0:
            raise ValueError("chunk_bytes and timeout_s must be > 0")
        self._client = client
        self.topic = topic
        self.chunk_bytes = chunk_bytes
        self.timeout_s = timeout_s

    def upload(self, data: bytes, what: str = "") -> PackageManifest:
        """Write ``data`` as a package: its chunks, then its manifest.

        ``what`` names the package in an error (its file).

        Returns:
            its manifest (``manifest.url`` is what a record names).

        Raises:
            PackageTooLargeError: ``data`` is over the store's limit (nothing is written).
            pulsar.PulsarException: a write failed (the package is incomplete: no
                manifest, so no reader takes it).
        """
        check_size(len(data), what or "(bytes)")
        manifest = PackageManifest.of(data, self.chunk_bytes)
        producer = self._client.create_producer(
            self.topic,
            batching_enabled=False,
            block_if_queue_full=True,
            send_timeout_millis=int(self.timeout_s * 1000),
        )
        try:
            for index, chunk in enumerate(split_chunks(data, self.chunk_bytes)):
                producer.send(chunk, partition_key=chunk_key(manifest.digest, index))
            producer.send(manifest.to_bytes(), partition_key=manifest_key(manifest.digest))
        finally:
            producer.close()
        log.info("uploaded %s (%d bytes, %d chunks)", manifest.url, manifest.size, manifest.chunks)
        return manifest

    def fetch(self, url: str) -> bytes:
        """The bytes of the package ``url`` (``pss://sha256/<hex>``), checked.

        Returns:
            the package's bytes: their size and sha256 are the manifest's.

        Raises:
            ValueError: ``url`` is not a package URL.
            PackageNotFoundError: the store has no manifest of it.
            PackageCorruptError: its chunks do not make it (missing, altered).
            OperationTimeoutError: the store could not be read within ``timeout_s``.
        """
        digest = parse_package_url(url)
        prefix = chunk_key(digest, 0).rpartition("/")[0] + "/"
        manifest_payload: bytes | None = None
        chunks: dict[int, bytes] = {}
        deadline = time.monotonic() + self.timeout_s
        reader = self._client.create_reader(
            self.topic,
            pulsar.MessageId.earliest,
            receiver_queue_size=_READER_QUEUE,
            is_read_compacted=True,
        )
        try:
            while reader.has_message_available():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OperationTimeoutError(
                        f"reading package {url} from {self.topic} took over {self.timeout_s:.0f} s"
                    )
                message = reader.read_next(timeout_millis=max(1, int(left * 1000)))
                key = message.partition_key()
                if key == manifest_key(digest):
                    manifest_payload = message.data()
                elif key.startswith(prefix) and key[len(prefix) :].isdigit():
                    chunks[int(key[len(prefix) :])] = message.data()
        except pulsar.Timeout as exc:
            raise OperationTimeoutError(f"reading package {url} from {self.topic}: {exc}") from exc
        finally:
            reader.close()
        if manifest_payload is None:
            raise PackageNotFoundError(
                f"package {url} is not in the package store {self.topic} (no manifest): "
                "upload it again (pulsar-state functions update --py FILE)"
            )
        return assemble(PackageManifest.from_bytes(manifest_payload, digest), chunks)
