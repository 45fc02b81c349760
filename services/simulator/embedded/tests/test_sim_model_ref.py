"""`--model` of `k4d simulate` / `k4d submit`: the forms the docs name, including the
`registry:NAME/VERSION` reference that `k4d train` and `k4d generate publish` print."""

from __future__ import annotations

import pytest
from k4d.errors import InvalidArgument
from k4d_embedded.inputs import model_ref


def test_registry_reference_as_printed_by_k4d_train():
    ref = model_ref("registry:k4d-tiny-cpu/tiny-cpu")
    assert (ref.name, ref.version, ref.uri) == ("k4d-tiny-cpu", "tiny-cpu", "")
    ref = model_ref("registry:k4d-tiny-cpu")
    assert (ref.name, ref.version, ref.uri) == ("k4d-tiny-cpu", "", "")


def test_name_version_directory_and_uri(tmp_path):
    assert (model_ref("kinema4d-act/3").name, model_ref("kinema4d-act/3").version) == ("kinema4d-act", "3")
    assert model_ref(str(tmp_path)).uri == str(tmp_path.resolve())
    assert model_ref("s3://models/x").uri == "s3://models/x"
    assert not model_ref("").name


def test_empty_registry_reference_is_one_clear_error():
    with pytest.raises(InvalidArgument, match="registry:NAME"):
        model_ref("registry:")


@pytest.mark.parametrize("text", ["/no/such/model", "./no-such-model", "../x/y", "~/models/none",
                                  "models/kinema4d/3"])
def test_a_missing_directory_is_an_error_not_the_static_world(text):
    """A mistyped model directory must not parse as name '' (= no model: static-world)."""
    with pytest.raises(InvalidArgument, match="--model"):
        model_ref(text)
