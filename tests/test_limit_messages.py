"""A budget set too low (``HOOKMAGIC_MAX_BYTES=1000``) gives one error that names the amount
once, with its unit, and suggests a value with which the same load then succeeds."""
from __future__ import annotations

import re

import pytest

import hookmagic
from hookmagic.common import limits
from hookmagic.common.errors import LimitExceeded
from hookmagic.recordings import FOLDER

# real recordings of each kind the budget guards: a saved trace (ZIP of Parquet), a gzip Kineto
# export, a JSON layer profile
FILES = ["transformer_training.hmtrace", "kineto_resnet18.json.gz", "torch_convnet.layers.json"]


@pytest.mark.parametrize("name", FILES)
def test_max_bytes_error_suggests_a_value_that_works(name, monkeypatch):
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "1000")
    with pytest.raises(LimitExceeded) as info:
        hookmagic.load(FOLDER / name)
    message = str(info.value)
    assert message.count("bytes") == 1, message
    assert "\n" not in message
    suggested = re.search(r"set HOOKMAGIC_MAX_BYTES=(\w+)", message).group(1)
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", suggested)
    hookmagic.load(FOLDER / name)          # the suggestion is enough for the whole load


def test_suggestion_is_round_and_at_least_what_is_needed(monkeypatch):
    assert limits.suggestion(limits.MAX_BYTES, 5000) == "5K"            # 5120 >= 5000
    assert limits.suggestion(limits.MAX_BYTES, 5120) == "5K"
    assert limits.suggestion(limits.MAX_BYTES, 5121) == "6K"
    assert limits.suggestion(limits.MAX_ROWS, 25_000_001) == "26M"      # rows: powers of 1000
    assert limits.suggestion(limits.MAX_DEPTH, 300) == "300"
    for need in (1, 999, 1024, 10**6, 3 << 30):
        # read back the way the variable is read: at least the need, under twice it (+1 unit)
        monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", limits.suggestion(limits.MAX_BYTES, need))
        assert need <= limits.MAX_BYTES.value <= 2 * need + 1024
