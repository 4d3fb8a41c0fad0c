"""What an admin refusal says: the broker's reason in one line, never its HTML page."""

from __future__ import annotations

import requests

from pulsar_state.cluster.admin import refusal_reason


def _response(status: int, body: str, content_type: str) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp.reason = "Unauthorized" if status == 401 else "Error"
    resp._content = body.encode()
    resp.headers["Content-Type"] = content_type
    return resp


JETTY_401 = """<html>
<head>
<meta http-equiv="Content-Type" content="text/html;charset=utf-8"/>
<title>Error 401 Authentication required</title>
</head>
<body><h2>HTTP ERROR 401 Authentication required</h2>
<table>
<tr><th>URI:</th><td>/admin/v3/functions/public/default/wordcount</td></tr>
<tr><th>STATUS:</th><td>401</td></tr>
</table>
</body>
</html>
"""


def test_an_html_error_page_gives_its_title() -> None:
    reason = refusal_reason(_response(401, JETTY_401, "text/html;charset=iso-8859-1"))
    assert reason == "Error 401 Authentication required"


def test_an_html_page_without_a_title_gives_the_status_line() -> None:
    reason = refusal_reason(_response(401, "<html><body>no</body></html>", "text/html"))
    assert reason == "HTTP 401 Unauthorized"


def test_a_json_reason_and_a_plain_body_are_kept() -> None:
    assert refusal_reason(_response(409, '{"reason": "Topic exists"}', "application/json")) == (
        "Topic exists"
    )
    assert refusal_reason(_response(500, "plain words", "text/plain")) == "plain words"
