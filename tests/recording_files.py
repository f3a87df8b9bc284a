"""The lab recordings' tests share these: a committed recording as plain JSON, and a copy written where a test edits
it (the reader's negative controls load an unchanged copy first)."""
import json

from specdec_lib.lab import recordings


def committed(kind: str) -> dict:
    """The committed recording of kind, as the JSON object in its file."""
    return json.loads(recordings.REFERENCE_PATHS[kind].read_text())


def write(tmp_path, data) -> str:
    """data written as JSON to tmp_path / "rec.json"; its path as a str."""
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(data))
    return str(path)
