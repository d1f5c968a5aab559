"""``python -m wattsched.profiling ...``: ``wattsched profile`` without the whole CLI's imports (no pydantic)."""

from ..cli.profile import main

main()
