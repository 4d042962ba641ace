"""lazymem.data.io: sha256_file against known digests, and read_json/require turning OS, JSON and shape
failures into a DataError that names the file (and the record and field where there is one)."""

import hashlib
import json

import pytest

from lazymem.data.io import read_json, require, sha256_file
from lazymem.data.schema import DataError

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # FIPS 180-2 vectors
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_sha256_file_matches_the_standard_test_vectors(tmp_path):
    empty, abc = tmp_path / "empty", tmp_path / "abc"
    empty.write_bytes(b"")
    abc.write_bytes(b"abc")
    assert sha256_file(empty) == EMPTY_SHA256
    assert sha256_file(str(abc)) == ABC_SHA256  # a str path works as well as a Path


def test_sha256_file_hashes_files_larger_than_one_read_chunk(tmp_path):
    data = bytes(range(256)) * (3 * 4096 + 17)  # about 3 MiB: several 1 MiB chunks and a partial one
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    path.write_bytes(data[:-1])
    assert sha256_file(path) != hashlib.sha256(data).hexdigest()


def test_read_json_returns_the_parsed_document(tmp_path):
    path = tmp_path / "ok.json"
    doc = [{"question_id": "q1", "answer": 7, "text": "naïve café"}, None, 1.5]
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    assert read_json(path) == doc
    assert read_json(str(path)) == doc


def assert_names_the_file(err: DataError, path) -> None:
    assert err.path == str(path) and err.record is None and err.field is None
    assert str(err).startswith(f"file {path}: ")


def test_read_json_missing_file_is_a_data_error_naming_it(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(DataError, match="no such file$") as err:
        read_json(path)
    assert_names_the_file(err.value, path)


def test_read_json_directory_and_empty_file_are_named_errors(tmp_path):
    with pytest.raises(DataError, match="is a directory, expected a JSON file") as err:
        read_json(tmp_path)
    assert_names_the_file(err.value, tmp_path)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(DataError, match="the file is empty, expected JSON$") as err:
        read_json(empty)
    assert_names_the_file(err.value, empty)


def test_read_json_truncated_file_says_where_and_that_it_looks_truncated(tmp_path):
    full = json.dumps([{"question_id": "q1", "answer": 7}] * 3)
    path = tmp_path / "cut.json"
    path.write_text(full[: full.rindex("7") + 1])  # cut right after the last value: no closing braces
    with pytest.raises(DataError) as err:
        read_json(path)
    assert_names_the_file(err.value, path)
    column = full.rindex("7") + 2  # the error is one past the last character (columns count from 1)
    assert str(err.value).endswith(
        f"not valid JSON at line 1, column {column}: Expecting ',' delimiter (the file looks truncated)"
    )


@pytest.mark.parametrize(
    "text, truncated",
    [
        ('[{"text": "café, naïve, 東京"}, {"text": "ab', True),  # cut inside a string, after multi-byte text
        ('{"text": "東京", "n": [1, 2', True),  # characters, not bytes, reach the end
        ('{"a": 1,}', False),  # complete, the error on its last character
        ('{"a": 1,}\n\n', False),
    ],
)
def test_read_json_says_truncated_only_when_the_text_ran_out(tmp_path, text, truncated):
    path = tmp_path / "f.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_json(path)
    assert ("(the file looks truncated)" in str(err.value)) == truncated


def test_read_json_error_inside_the_file_has_position_and_no_truncation_hint(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n  {"a": 1},\n  {"b": nope},\n  {"c": 3}\n]\n')
    with pytest.raises(DataError) as err:
        read_json(path)
    assert_names_the_file(err.value, path)
    assert "not valid JSON at line 3, column 9: Expecting value" in str(err.value)
    assert "truncated" not in str(err.value)


def test_read_json_non_json_text_is_a_named_error(tmp_path):
    path = tmp_path / "notes.json"
    path.write_text("question_id,answer\nq1,7\n")
    with pytest.raises(DataError, match="not valid JSON at line 1, column 1: Expecting value") as err:
        read_json(path)
    assert_names_the_file(err.value, path)


def test_read_json_non_utf8_bytes_name_the_byte_offset(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('["caf\u00e9"]'.encode("latin-1"))  # é as the single byte 0xe9, at offset 5
    with pytest.raises(DataError, match="not UTF-8 text: .* at byte 5$") as err:
        read_json(path)
    assert_names_the_file(err.value, path)


def test_require_returns_a_present_value_of_the_right_type():
    rec = {"question": "Why?", "answer": 3}
    assert require(rec, "question", str, "f.json", "q1") == "Why?"
    assert require(rec, "answer", (str, int, float), "f.json", "q1") == 3


def test_require_names_file_record_and_field_of_a_missing_key():
    with pytest.raises(DataError) as err:
        require({"question": "Why?"}, "answer", str, "f.json", "q1")
    assert (err.value.path, err.value.record, err.value.field) == ("f.json", "q1", "answer")
    assert str(err.value) == "file f.json, record q1, field 'answer': missing"


def test_require_names_expected_and_actual_types():
    with pytest.raises(DataError, match=r"field 'answer': expected str, got int$"):
        require({"answer": 7}, "answer", str, "f.json", "q1")
    with pytest.raises(DataError, match=r"field 'answer': expected str or int or float, got NoneType$"):
        require({"answer": None}, "answer", (str, int, float), "f.json", "q1")


def test_require_on_a_non_object_record_names_its_type_and_no_field():
    with pytest.raises(DataError) as err:
        require(["q1"], "question_id", str, "f.json", 4)
    assert err.value.record == 4 and err.value.field is None
    assert str(err.value) == "file f.json, record 4: expected a JSON object, got list"
