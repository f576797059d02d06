"""An export's OS error names what to fix, from the real error the file system raises (issue 20)."""

import os

from recovery.workspaces.exports import os_error_words


def raised(fn) -> OSError:
    try:
        fn()
    except OSError as exc:
        return exc
    raise AssertionError("no error")


def test_a_file_where_the_destination_should_be_is_named_as_such(tmp_path):
    blocker = tmp_path / "exports"
    blocker.write_text("in the way")
    below = str(blocker / "site")
    said = os_error_words(raised(lambda: os.makedirs(below, exist_ok=True)), below)
    assert said.startswith(f"{blocker} is a file, not a folder, and it is a parent of the destination {below}")
    itself = os_error_words(raised(lambda: os.makedirs(blocker, exist_ok=True)), str(blocker))
    assert itself.startswith(f"{blocker} is a file, not a folder, and it is the destination itself")


def test_other_errors_are_said_in_words_with_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "a.txt"
    said = os_error_words(raised(lambda: open(missing)), str(tmp_path / "nowhere"))
    assert said == f"Copying to {tmp_path / 'nowhere'} failed: {missing}: it does not exist."
    assert "Errno" not in said
