"""Secret detection (memories are never secrets)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ctx_magic.memory.randomness import shannon_bits
from ctx_magic.memory.secrets import detect_secret, find_secret, refusal_line
from ctx_magic.memory.store import MemoryStore, SecretRefused

BODY = "Zq8" + "x" * 13 + "Lw4" + "b" * 9  # a made-up credential body, not a real key
# Made-up values in the shapes of real ones, assembled here so no scanner mistakes this file for a leak.
AWS_ID = "AKIA" + "2OGYBAH6TP4WVLXZ"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG" + "/bPxRfiCYzq8Lw4Xb2TkE"
RANDOM_32 = "7Hq2LmZ9xR4tVb8N" + "wK3pYc6FjD1sGa5E"
HEX_40 = "3f2a9c1e8b7d6a5f4e3d2c1b" + "0a9f8e7d6c5b4a39"
HEX_64 = "e3b0c44298fc1c149afbf4c8996fb924" + "27ae41e4649b934ca495991b7852b855"

# Realistic things a user or an extraction might try to remember, that hold a credential.
REALISTIC_SECRETS = [
    "the database password is Tr0ub4dor&3",
    "My wifi password is swordfish",
    "The admin password for Grafana is 'admin'",
    "the door passcode is 4711",
    "pwd: hunter2",
    "password: correct horse battery staple",
    "token=ab12cd34ef56",
    "api key Xk29fLq0Zm3Nw8Yt",
    "my github token is " + "ghp_" + BODY + "abcd",
    f"aws_key_id: {AWS_ID}, aws_secret: {AWS_SECRET}",
    f"aws_secret_access_key = {AWS_SECRET}",
    "DB_PASSWORD=s3cr3t!",
    "SECRET_KEY = 'django-insecure-" + BODY + "'",
    # Django's generated keys draw from letters, digits and !@#$%^&*(-_=+): a "(" is not a call.
    "SECRET_KEY = 'django-insecure--cejy0z&5w^nhg(n^p+dl@hb^8xu80$vz3f$tam__s*!8$m&33'",
    'the django secret key is "k3(x!v@q9#w$e%r^t&y*u-i_o=p+a"',
    "client_secret: " + HEX_40[:32],
    "the api secret is " + HEX_40,
    "export OPENAI_API_KEY=sk-proj-" + BODY,
    "Use sk-ant-api03-" + BODY + " for the batch jobs",
    "xoxb-" + "1234567890-" + BODY,
    "Alerts go to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/" + BODY,
    "stripe: sk_live_" + BODY,
    "maps key AIza" + BODY + BODY,
    "hf_" + BODY + "Qr7Ts",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + BODY,
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "postgresql://analyst:Winter2024!@warehouse.internal:5432/sales",
    "mongodb+srv://admin:pa55word@cluster0.example.net/test",
    "Storage: DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=" + BODY + RANDOM_32,
    f"the signing salt is {RANDOM_32}",
    "Authorization: Bearer " + BODY,
    # Set through a mapping, as notebooks set credentials.
    "os.environ['DB_PASSWORD'] = 'hunter22'",
    'os.environ["API_TOKEN"] = "abc123def456ghi789"',
    "config['password'] = 'Tr0ub4dor'",
    # A service's key in its environment variable (Kaggle's is 32 hex characters).
    "export KAGGLE_KEY=f3a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6",
    "os.environ['KAGGLE_KEY'] = '0123456789abcdef0123456789abcdef'",
    # A password on a command line.
    "Load it with mysql -u root -pS3cr3tPw sales < dump.sql",
    "mysqldump -uadmin -phunter22 warehouse > backup.sql",
    "curl -u admin:S3cr3tPw https://api.example.com/v1/export",
    # A login given as its user and password, a passphrase of plain words.
    "the staging db login is admin / Winter2024!",
    "The login for the warehouse is analyst:Tr0ub4dor",
    "sign-in: root / p@ssw0rd",
    "the wifi passphrase is correct horse battery staple",
    "The office wifi password is purple monkey dishwasher lamp.",
]

# Realistic memories that mention credentials, hashes, ids, paths and numbers without holding a secret.
REALISTIC_NON_SECRETS = [
    "The password field is validated in forms.py",
    "Passwords are hashed with bcrypt before they are stored.",
    "The password policy requires rotation every 90 days.",
    "The password is case-sensitive.",
    "The password is stored in 1Password under the prod vault.",
    "The password is 12 characters long at least.",
    "The API key is read from the ANTHROPIC_API_KEY environment variable.",
    "api_key=os.environ['ANTHROPIC_API_KEY'] is how the key is read.",
    "password=${DB_PASSWORD} in the compose file",
    "The session token expires after 30 minutes.",
    "The access token is refreshed by the client library.",
    "The token limit is 200000 tokens.",
    "Use max_tokens=4096 for long summaries.",
    "The tokenizer is o200k_base.",
    "Set PASSWORD_MIN_LENGTH=12 in settings.",
    "The secret sauce is feature scaling before PCA.",
    "The pwd is /home/jane/analysis when the kernel starts.",
    "Bearer token auth is used for the internal API.",
    "token=None is the default of the client.",
    f"Fixed in commit {HEX_40}.",
    f"The raw dataset's sha256 is {HEX_64}.",
    "Run 6f1c0e8a-3b2d-4c5e-9f7a-1b2c3d4e5f6a is the baseline.",
    "Windows GUID 6F1C0E8A-3B2D-4C5E-9F7A-1B2C3D4E5F6A names the driver.",
    "The notebook lives in analysis/quarterly_revenue_forecast_2024_final_v2.ipynb",
    "Data is under /Users/JaneDoe/Projects/ChurnAnalysis2024/data/raw",
    "Columns: customer_id, signup_date, plan_tier, monthly_revenue_usd, churned_flag",
    "df_events has columns event_id, token_count, api_key_hash, password_reset_at",
    "Revenue grew 12.5% to 1,234,567 USD in Q3 2024; learning rate 3e-4 works best.",
    "Use the sk-learn style API for estimators.",
    "The model id is claude-sonnet-4-5 and the region is eu-west-1.",
    "token = secrets.token_hex(8) makes a fresh one; password = getpass.getpass() asks for it.",
    # A path given to pwd (the working folder) or to a passphrase says where something is.
    "pwd: /home/jane/notebooks when the kernel starts.",
    "The kernel's pwd=/srv/data/churn after the restart.",
    "passphrase: ~/keys/id_ed25519.pass is read by the deploy job.",
    # Command lines that ask for the password or read it from a variable.
    "Connect with mysql -u root -p sales (it asks for the password).",
    "mysql -h db.internal -P 3306 -u analyst -p",
    "curl -u admin https://api.example.com asks for the password.",
    "curl -u $API_USER:$API_TOKEN https://api.example.com/v1/export",
    "Request a session token https://auth.example.com/v2/login issues them.",
    # Identifiers named as keys: words and a date or a number, not random characters.
    "The session key is session_20241127 in the events table.",
    "The join key is customer_id2, not customer_id.",
    # An AWS resource name says which key, never the key itself.
    "Encryption key id: arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    # Other keys: a path, a column, a constant.
    "S3_KEY = 'raw/2024/11/events.parquet' is where the events land.",
    "SORT_KEY = 'created_at' orders the export.",
    "CACHE_KEY = 'model_v2_20240101' names the cached features.",
    "sorted(rows, key=df.columns[0]) keeps the date order.",
    # A column named password is data, not a credential.
    "df['password'] = df['password'].str.strip() before hashing.",
    "df['password'] = hashed for every row.",
    # Figures about passwords (a rate, a share, a count) are measurements, not passwords.
    "The password reset rate is 3.2% of logins.",
    "Password resets were 4,512 in Q3.",
    "The passcode failure rate was 0.032 in March.",
    "password = getpass() asks for it, and api_key = os.getenv('API_KEY') reads it.",
    # A login named without its password, users and paths in pairs, prose about a passphrase.
    "The staging db login is admin; the password is in the team vault.",
    "The login page is auth / callback in the router.",
    "The users are alice / bob on the review rota.",
    "The account is 2023/2024 in the ledger.",
    "The username column is user_name / login_name in the old schema.",
    "The wifi passphrase is stored in the office vault.",
    "The passphrase is never written down anywhere.",
    "The passphrase is required for every deploy key.",
    "The password is sent by email to the new hire.",
]


@pytest.mark.parametrize("text", REALISTIC_SECRETS)
def test_realistic_secrets_are_refused(text: str) -> None:
    assert find_secret(text) is not None


@pytest.mark.parametrize("text", REALISTIC_NON_SECRETS)
def test_realistic_non_secrets_pass(text: str) -> None:
    assert find_secret(text) is None


def test_the_kind_never_holds_the_secret() -> None:
    for text in REALISTIC_SECRETS:
        kind = find_secret(text)
        assert not any(len(word) > 3 and word in kind for word in text.split() if any(c.isdigit() for c in word))


def test_common_secret_kinds_are_named() -> None:
    assert find_secret("the database password is Tr0ub4dor&3") == "a password in plain words"
    assert find_secret(f"aws_key_id {AWS_ID}") == "an AWS access key id"


def test_one_refusal_line_names_the_kinds() -> None:
    assert refusal_line([]) is None
    assert refusal_line(["a password in plain words"]) == (
        "1 memory was not stored: it looked like it contained a password in plain words. Memories are never "
        "secrets.")
    assert refusal_line(["a", "b", "a"], "candidate") == (
        "3 candidates were not stored: they looked like they contained a, b. Memories are never secrets.")


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
        ("password: /x9Kq!", "a value assigned to password"),
        ('api_key="abcdef123"', "a value assigned to api_key"),
        ("client_secret: abc.def.ghi", "a value assigned to client_secret"),
        ("the salt 7Hq2LmZ9xR4tVb8NwK3pYc6FjD1sGa5E here", "a long random-looking string (a key or token?)"),
        ('kaggle.json holds {"username": "jane", "key": "0123456789abcdef0123456789abcdef"}', "a Kaggle API key"),
        (f"MAPBOX_ACCESS_TOKEN pk.eyJ1IjoiamFuZSIsImEiOiJ{BODY}.{BODY}", "a Mapbox token"),
        ("My password manager password is Tr0ub4dor&3.", "a password in plain words"),
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
        "The team's password manager is 1Password.",  # the sentence is about the manager
        "The token limit is 4096 for the small model.",
        'The cache is keyed by {"key": "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d"}, an md5 of the query.',
    ],
)
def test_ordinary_text_is_not_a_secret(text: str) -> None:
    assert find_secret(text) is None


def test_entropy_of_uniform_and_repeated_text() -> None:
    assert shannon_bits("") == 0.0
    assert shannon_bits("aaaa") == 0.0
    assert shannon_bits("abcd") == pytest.approx(2.0)


# --- glued, in URLs, after = or : ----------------------------------------------------------------

EXAMPLE_ID = "AKIA" + "IOSFODNN7EXAMPLE"  # AWS's documented example key id, assembled


@pytest.mark.parametrize(
    ("text", "kind", "masked"),
    [
        (f"aws_key_id{EXAMPLE_ID} for prod", "an AWS access key id", "AKIA************…"),
        (f"prod_{EXAMPLE_ID}", "an AWS access key id", "AKIA************…"),
        (f"theKey{EXAMPLE_ID}", "an AWS access key id", "AKIA************…"),
        (f"mytokenghp_{BODY}", "a GitHub token", "ghp_************…"),
        (f"deployglpat-{BODY}", "a GitLab token", "glpa************…"),
        (f"key=sk-ant-api03-{BODY}", "an Anthropic API key", "sk-a************…"),
        (f"aws_secret_access_key{AWS_SECRET[:40]}", "an AWS secret access key", "wJal************…"),
        ("apikey" + "Xk29fLq0" + "Zm3Nw8Yt", "a credential glued to the word apikey", "Xk************…"),
        (f"https://api.example.com/v1/rates?key={BODY}", "a credential in a URL (key=)", "Zq8x************…"),
        (f"https://acct.blob.core.windows.net/c?sv=2021-08-06&sig={BODY[:10]}%2B{BODY[10:]}%3D",
         "a credential in a URL (sig=)", "Zq8x************…"),
        ("https://intranet.example.com/report?user=ana&password=hunter22", "a credential in a URL (password=)",
         "h*******"),
        (f"https://example.com/cb?access_token={BODY}", "a credential in a URL (access_token=)",
         "Zq8x************…"),
        ("secret:hunter22", "a value assigned to secret", "h*******"),
        (f'"api_key": "{BODY}"', "a value assigned to api_key", "Zq8x************…"),
        (f"token: {BODY}", "a value assigned to token", "Zq8x************…"),
        ("the api key for the export is eHcKugnhVauYSJHV" + "vyXuRGDvMfVcGJFu", "an api key in plain words",
         "eHcK************…"),  # a random key that happens to hold no digit
        ("https://api.example.com/v2/export?key=wxJNHiZNhXNhIexO" + "eHedjzirGMnXLyLr&format=csv",
         "a credential in a URL (key=)", "wxJN************…"),
    ],
)
def test_keys_glued_to_words_in_urls_and_after_a_sign_are_found_and_masked(text: str, kind: str, masked: str) -> None:
    found = detect_secret(text)
    assert found is not None and (found.kind, found.masked) == (kind, masked)
    assert found.value not in found.masked and found.described == f"{kind} ({masked})"


@pytest.mark.parametrize(
    "text",
    [
        f"The AWS fix landed in commit {HEX_40}.",  # a commit id after the word AWS
        "task-management-dashboard-2024-v2 is the repository",  # "sk-" inside a word
        "risk_test_results2024finalreport.csv holds the backtest",  # "sk_test_" inside a word
        "tokenCountForModel2024Limit is the config field",  # a credential's name glued to an identifier
        "keyIdForPartition2024Q3 is the partition key",
        "special_tokens=_O200K_SPECIAL in the tokenizer",
        "ChurnPredictionModelTrainer2024FinalVersion3 is the class to use",
        "https://docs.example.com/search?q=python&page=2&sort=key",
        "https://example.com/book?passenger=bob&seat=12A",
        "https://example.com/docs?token=${API_TOKEN} is how the dashboard is linked",
        "https://example.com/oauth/callback?code=abc&state=xyz",
        f"The dataset's sha256 is {HEX_64} (see ?checksum={HEX_64[:16]})",
        "The model checkpoint is checkpoints/epoch_12-step_4800.ckpt",
        "Columns: aws_region, s3_key_prefix, token_count, api_key_hash",
        "Use key=lambda row: row.date when sorting; sorted(rows, key=len) otherwise.",
        "The session token is made by RefreshAccessTokenHandler in auth.py",  # words run together
        "https://example.com/api?token=RefreshAccessTokenHandler is the handler's route",
    ],
)
def test_identifiers_hashes_and_urls_without_credentials_pass(text: str) -> None:
    assert detect_secret(text) is None


def test_the_issue_case_is_refused_with_the_key_masked() -> None:
    found = detect_secret(f"aws_key_id{EXAMPLE_ID} for prod")
    assert found is not None and found.kind == "an AWS access key id"
    assert EXAMPLE_ID not in found.masked and found.masked.startswith("AKIA")


@pytest.mark.parametrize("text", ["the staging db login is admin / Winter2024!",
                                  "the wifi passphrase is correct horse battery staple"])
def test_a_secret_in_plain_words_is_refused_as_a_memory_and_never_stored(tmp_path, text: str) -> None:
    store = MemoryStore(tmp_path / "memory", "project")
    with pytest.raises(SecretRefused) as refused:
        store.add(text, type="project", now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert "Winter2024!" not in str(refused.value) and "horse battery" not in str(refused.value)
    assert list(tmp_path.rglob("*.md")) == []
