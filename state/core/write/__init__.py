"""The write side, in call order (see docs/state.md, *The write path*).

- :mod:`.request`: one write asked for: its generator, future and identity;
- :mod:`.writer`: the one thread that orders, groups, builds and sends writes;
- :mod:`.entry_sender`: a write's messages out as one entry;
- :mod:`.tenure`: holding the topic, an explicit state machine;
- :mod:`.takeover`: how often a writer may fence another.
"""
