"""The README's configuration reference is rendered from the settings: adding a setting documents it."""

from pathlib import Path

from config.reference import iter_settings, render_reference

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_carries_the_current_reference() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- config-reference:start -->\n") + len("<!-- config-reference:start -->\n")
    end = text.index("<!-- config-reference:end -->")
    hint = "run `python -m config.reference` and paste its table into README.md"
    assert text[start:end] == render_reference(), hint


def test_every_setting_has_help_text() -> None:
    missing = [key for key, _, help_text in iter_settings() if not help_text]
    assert missing == []
