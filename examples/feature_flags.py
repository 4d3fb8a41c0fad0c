"""Feature flags in a PulsarMap: set, read back everywhere, watch changes.

    python examples/feature_flags.py --service-url pulsar://localhost:6650 \\
        --admin-url http://localhost:8080

Every process that opens the same topic sees the same flags; ``latest=True``
reads see every write acknowledged before them, whichever process made it.
"""

from __future__ import annotations

import argparse
import threading

import pulsar

from pulsar_state import PulsarMap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--admin-url", default="http://localhost:8080")
    parser.add_argument("--topic", default="persistent://public/default/feature-flags")
    args = parser.parse_args()

    client = pulsar.Client(args.service_url)
    try:
        with PulsarMap[str, bool](client, args.topic, admin_url=args.admin_url) as flags:
            changed = threading.Event()
            seen: list[str] = []

            def on_change(change: object) -> None:
                seen.append(repr(change))
                changed.set()

            watch = flags.watch("checkout-", on_change, prefix=True)
            flags.put("checkout-v2", True).result(30)
            # read back as any other process would: every acknowledged write
            print("checkout-v2:", flags.get("checkout-v2", latest=True).result(30))
            # flip it atomically, whatever others did meanwhile
            print("flipped to:", flags.update("checkout-v2", lambda v: not v).result(30))
            changed.wait(30)
            watch.stop()
            print("watched:", seen[0] if seen else "nothing")
    finally:
        client.close()


if __name__ == "__main__":
    main()
