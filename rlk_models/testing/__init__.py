"""Public test helpers (like ``torch.testing``): tiny checkpoints made locally (``tiny``), a
vLLM-style paged runner without vLLM (``paged_runner``) and paged-step replay (``paged_steps``)."""
