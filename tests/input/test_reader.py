import gzip
import io

import pytest

from triage.input.reader import InputError, iter_chunks, open_input


def lines_of(chunks):
    data = b"".join(c.data for c in chunks)
    return data.split(b"\n")


def test_chunks_end_at_line_boundaries_and_number_lines():
    data = b"".join(b"line %d\n" % i for i in range(1, 1001))
    chunks = [c.copy() for c in iter_chunks(io.BytesIO(data), chunk_size=100)]
    assert all(c.data.endswith(b"\n") for c in chunks)
    assert b"".join(c.data for c in chunks) == data
    for chunk in chunks:
        first = chunk.data.split(b"\n", 1)[0]
        assert first == b"line %d" % chunk.first_line


def test_line_longer_than_buffer_and_no_final_newline():
    long_line = b"x" * 5000
    data = b"a\n" + long_line + b"\nlast"
    chunks = [c.copy() for c in iter_chunks(io.BytesIO(data), chunk_size=64)]
    assert b"".join(c.data for c in chunks) == data
    assert chunks[-1].data.endswith(b"last")


def test_gzip_is_detected_by_content(tmp_path):
    path = tmp_path / "server.log.gz"
    path.write_bytes(gzip.compress(b"hello\nworld\n"))
    name, stream = open_input(str(path))
    assert b"".join(c.copy().data for c in iter_chunks(stream)) == b"hello\nworld\n"
    plain = tmp_path / "renamed.log"
    plain.write_bytes(gzip.compress(b"x\n"))
    assert b"".join(c.copy().data for c in iter_chunks(open_input(str(plain))[1])) == b"x\n"


def test_missing_file_is_a_one_line_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        open_input(str(tmp_path / "absent.log"))
