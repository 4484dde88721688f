"""The console scripts (``rlk-convert``, ``rlk-verify``, ``rlk-bisect``, ``rlk-serve``, ``rlk-grpo``,
``rlk-demo``): argument parsing and printing over the library; no CLI imports another."""
