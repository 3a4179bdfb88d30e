"""The one rail key-file reader (rails/key_file.py) the refunds and the enforcer share."""

from __future__ import annotations

from pathlib import Path

import pytest

from envelopay.errors import ConfigError
from envelopay.rails.key_file import read_key_file


def test_a_solana_keypair_and_a_hex_key_read_as_their_bytes(tmp_path: Path) -> None:
    sol = tmp_path / "id.json"
    sol.write_text("[1, 2, 255]\n")
    hexed = tmp_path / "base.key"
    hexed.write_text("0xA0ff\n")
    assert read_key_file(sol) == bytes([1, 2, 255])
    assert read_key_file(str(hexed)) == bytes([0xA0, 0xFF])


@pytest.mark.parametrize("text", ["[1, 256]", "[1, ", "not hex", '["a"]'])
def test_a_file_of_neither_shape_names_the_file_never_its_contents(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "k"
    bad.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_key_file(bad)
    assert str(bad) in str(err.value)
    assert text not in str(err.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read key file"):
        read_key_file(tmp_path / "absent")
