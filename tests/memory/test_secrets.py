"""Secret detection (SPEC X1: memories are never secrets)."""

from __future__ import annotations

import pytest

from ctx_magic.memory.secrets import find_secret, shannon_bits

BODY = "Zq8" + "x" * 13 + "Lw4" + "b" * 9  # a made-up credential body, not a real key


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"sk-ant-api03-{BODY}", "an Anthropic API key"),
        (f"key: sk-{BODY}", "an API key (sk-...)"),
        (f"sk_live_{BODY}", "a Stripe key"),
        ("AKIA" + "IOSFODNN7EXAMPLE", "an AWS access key id"),
        ("ASIA" + "ABCDEFGHIJKLMNOP is the session key", "an AWS access key id"),
        (f"gho_{BODY}", "a GitHub token"),
        (f"github_pat_{BODY}_{BODY}", "a GitHub token"),
        ("xoxp-12345-67890-" + BODY, "a Slack token"),
        (f"AIza{BODY}{BODY}", "a Google API key"),
        (f"eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.{BODY}", "a JSON web token"),
        (f"Authorization: bearer {BODY}", "a bearer token"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "a private key block"),
        ("-----BEGIN PRIVATE KEY-----", "a private key block"),
        ("postgres://admin:s3cretpw@db.internal:5432/sales", "credentials in a URL"),
        ("password = 'tr0ub4dor'", "a value assigned to password"),
        ("PASSWD: letmein", "a value assigned to passwd"),
        ('api_key="abcdef123"', "a value assigned to api_key"),
        ("client_secret: abc.def.ghi", "a value assigned to client_secret"),
        ("the salt 7Hq2LmZ9xR4tVb8NwK3pYc6FjD1sGa5E here", "a long random-looking string (a key or token?)"),
    ],
)
def test_each_kind_of_secret_is_named(text: str, kind: str) -> None:
    assert find_secret(text) == kind


@pytest.mark.parametrize(
    "text",
    [
        "Prefers plotly over matplotlib for interactive charts.",
        "The password policy requires rotation every 90 days.",
        "Never print the token in a notebook cell.",
        "token=None is the default of the client.",
        "api_key=os.environ['ANTHROPIC_API_KEY'] is how the key is read.",
        "password: <your password>",
        "password=${DB_PASSWORD}",
        "token: ***",
        "Fixed in commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39.",
        "Run 6f1c0e8a-3b2d-4c5e-9f7a-1b2c3d4e5f6a is the baseline.",
        "The notebook lives in analysis/quarterly_revenue_forecast_2024_final_v2.ipynb",
        "Use the sk-learn style API for estimators.",
        "Call it with a Bearer header read from the environment.",
    ],
)
def test_ordinary_text_is_not_a_secret(text: str) -> None:
    assert find_secret(text) is None


def test_entropy_of_uniform_and_repeated_text() -> None:
    assert shannon_bits("") == 0.0
    assert shannon_bits("aaaa") == 0.0
    assert shannon_bits("abcd") == pytest.approx(2.0)
