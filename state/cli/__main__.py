"""``python -m pulsar_state.cli``: the ``pulsar-state`` command."""

from pulsar_state.cli import main

if __name__ == "__main__":
    main()
