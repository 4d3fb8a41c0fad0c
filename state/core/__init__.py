"""The replicated state machine's machinery (PIP-137), generic in the state and its ops.

``write/`` is the write side, in call order: a request, the writer (which
orders, groups, builds and sends, holding the topic through its tenure), the
entry sender, the tenure's state machine and the takeover limiter.
"""
