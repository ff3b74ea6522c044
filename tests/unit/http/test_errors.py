import inspect

import msgspec

import headway.errors as errors
from headway.http.asgi import error_response


def all_errors():
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.HeadwayError)
    ]


def test_every_error_has_a_docstring_a_type_and_a_status():
    seen_types = set()
    for cls in all_errors():
        assert cls.__doc__ and cls.__doc__.strip()
        assert 400 <= cls.status < 600
        assert cls.type not in seen_types
        seen_types.add(cls.type)


def test_error_response_is_json_with_type_message_and_retry_after():
    response = error_response(errors.Overloaded("busy", retry_after_s=2.2))
    assert response.status == 503
    assert response.headers["retry-after"] == "3"
    assert msgspec.json.decode(response.body) == {
        "error": {"type": "overloaded", "message": "busy"}
    }
