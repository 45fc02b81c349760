"""Logs cut user strings to a sane length: a hostile 5 kB path in a message, an extra or
an exception (`OSError: File name too long: '<path>'`) cannot flood the log."""

import io
import json
import logging

from k4d.logs import MAX_MESSAGE_CHARS, MAX_TRACEBACK_LINE_CHARS, JsonFormatter, clip

PATH = "/models/" + "m" * 5000


def test_clip_keeps_short_text_and_notes_what_it_cut():
    assert clip("panda") == "panda"
    assert clip(42) == "42"
    cut = clip(PATH, 100)
    assert cut.startswith(PATH[:100]) and cut.endswith(f"...[{len(PATH) - 100} more chars]")


def test_formatter_clips_message_extras_and_traceback_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("test"))
    logger = logging.getLogger("k4d.test.clip")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            open(PATH)  # noqa: SIM115 - raises: the name is too long for the OS
        except OSError:
            logger.exception("load failed for %s", PATH, extra={"model": PATH, "frames": 49})
    finally:
        logger.removeHandler(handler)
    line = stream.getvalue().strip()
    entry = json.loads(line)
    assert len(entry["message"]) <= MAX_MESSAGE_CHARS + 40
    assert len(entry["model"]) <= MAX_MESSAGE_CHARS + 40 and entry["frames"] == 49
    assert "OSError" in entry["exception"] and "more chars]" in entry["exception"]
    assert max(len(x) for x in entry["exception"].splitlines()) <= MAX_TRACEBACK_LINE_CHARS + 40
    assert len(line) < 8000  # was > 15 kB: the path three times over
