"""Rollout side: driving vLLM engines (``engine``), the train-vs-rollout parity sweep (``parity``)
and weight sync into a running engine (``sync``)."""
