"""Which server answers the agent: Claude through Anthropic's API, Amazon Bedrock or Google
Vertex AI (the `provider` setting), or, with no Anthropic key, the offline stand-in. Chosen
here, at the top, so the agent package never knows the stand-in exists.

Each provider goes through the anthropic SDK's own client with that provider's usual
credentials: ANTHROPIC_API_KEY, or ANTHROPIC_AUTH_TOKEN (a bearer token, as an LLM gateway takes it),
with ANTHROPIC_BASE_URL for a server other than Anthropic's; for Bedrock the AWS credential chain
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE or the `aws_profile`
setting, a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK) and AWS_REGION or the `region` setting
(`pip install "ctx_magic[bedrock]"`); for Vertex Google's application default credentials
(`gcloud auth application-default login`, `pip install "ctx_magic[vertex]"`), CLOUD_ML_REGION or
`region`, ANTHROPIC_VERTEX_PROJECT_ID or `project`. ANTHROPIC_BEDROCK_BASE_URL and
ANTHROPIC_VERTEX_BASE_URL point a provider's client elsewhere (a proxy, the stand-in in tests).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.errors import CtxMagicError
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import offline_client
from ctx_magic.settings import DEFAULTS, Settings

OFFLINE_NOTICE = (
    "No ANTHROPIC_API_KEY is set: ctx_magic is using its offline stand-in, a deterministic local "
    "server that speaks the Messages API (not Claude). Set ANTHROPIC_API_KEY to talk to Claude."
)
OFFLINE_WINDOW = 200_000  # the stand-in reports the API's standard window


@dataclass(frozen=True)
class Backend:
    """An SDK client and what it talks to."""

    client: Any
    """An anthropic.Anthropic, AnthropicBedrock or AnthropicVertex client (or one over the stand-in)."""
    name: str
    """'anthropic', 'bedrock', 'vertex' or 'offline'."""
    notice: str
    """The line that tells the user which server answers."""
    stand_in: OfflineAPI | None = None
    """The offline stand-in itself, when it is the backend (its request log can be read)."""
    provider: str = DEFAULTS.provider
    """Whose request shapes the client speaks: anthropic, bedrock or vertex (model ids, counting)."""

    @property
    def offline(self) -> bool:
        return self.stand_in is not None

    def with_retries(self, max_retries: int) -> Backend:
        return Backend(self.client.with_options(max_retries=max_retries), self.name, self.notice, self.stand_in,
                       self.provider)


def choose_backend(env: Mapping[str, str] | None = None, settings: Settings | None = None, *,
                   offline_window: int = OFFLINE_WINDOW, vertex_credentials: Any = None,
                   clock: Callable[[], float] = time.monotonic) -> Backend:
    """The client for the `provider` setting, with the settings' retries, region, project and AWS
    profile. For Anthropic: the server at ANTHROPIC_BASE_URL (else Anthropic's)
    with ANTHROPIC_AUTH_TOKEN as a bearer token or ANTHROPIC_API_KEY (the token first when both are
    set, the order Claude Code uses, so one environment serves both), else the stand-in. A base URL
    without a credential is refused: silently answering from the stand-in instead of the server
    someone pointed ctx_magic at would be a surprise. `vertex_credentials` replaces Google's
    default credentials (tests); `clock` is what the stand-in's prompt cache expires by."""
    env = os.environ if env is None else env
    settings = Settings() if settings is None else settings
    max_retries = settings.max_retries
    if settings.provider == "bedrock":
        return _bedrock(env, max_retries, settings.region, settings.aws_profile)
    if settings.provider == "vertex":
        return _vertex(env, max_retries, settings.region, settings.project, vertex_credentials)
    import anthropic

    token = _value(env, "ANTHROPIC_AUTH_TOKEN")
    key = _value(env, "ANTHROPIC_API_KEY")
    base_url = _value(env, "ANTHROPIC_BASE_URL")
    where = f" at {base_url}" if base_url else ""
    if token:  # passed explicitly, so the SDK reads no credential of its own from the process
        client = anthropic.Anthropic(auth_token=token, base_url=base_url, max_retries=max_retries)
        notice = f"Using the Anthropic Messages API{where} with the bearer token in ANTHROPIC_AUTH_TOKEN."
        return Backend(client, "anthropic", notice)
    if key:
        client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=max_retries)
        return Backend(client, "anthropic", f"Using the Anthropic Messages API{where}.")
    if base_url:
        raise CtxMagicError(f"ANTHROPIC_BASE_URL is set ({base_url}) but neither ANTHROPIC_API_KEY nor "
                            "ANTHROPIC_AUTH_TOKEN is: set the key (or a gateway's bearer token) to use that server, "
                            "or unset ANTHROPIC_BASE_URL to use the offline stand-in.")
    # The stand-in's prompt cache expires on the kernel's clock, as the session judges it cold by it.
    stand_in = OfflineAPI(OfflineConfig(window=offline_window), clock=clock)
    return Backend(offline_client(stand_in, max_retries=max_retries), "offline", OFFLINE_NOTICE, stand_in)


def _value(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _bedrock(env: Mapping[str, str], max_retries: int, region: str, aws_profile: str) -> Backend:
    import anthropic

    try:
        import boto3  # noqa: F401 - the SDK signs Bedrock requests with botocore
    except ImportError as error:
        raise CtxMagicError('Bedrock needs boto3: pip install "ctx_magic[bedrock]".') from error
    token = _value(env, "AWS_BEARER_TOKEN_BEDROCK")
    keys = {"aws_access_key": _value(env, "AWS_ACCESS_KEY_ID"), "aws_secret_key": _value(env, "AWS_SECRET_ACCESS_KEY"),
            "aws_session_token": _value(env, "AWS_SESSION_TOKEN")}
    credentials: dict[str, Any] = {"api_key": token} if token else {k: v for k, v in keys.items() if v}
    profile = aws_profile or _value(env, "AWS_PROFILE")
    if not token and not credentials and profile:
        credentials["aws_profile"] = profile
    where = region or _value(env, "AWS_REGION", "AWS_DEFAULT_REGION")
    try:
        client = anthropic.AnthropicBedrock(aws_region=where, base_url=_value(env, "ANTHROPIC_BEDROCK_BASE_URL"),
                                            max_retries=max_retries, **credentials)
    except ValueError as error:  # no region anywhere, or a key and AWS credentials together
        raise CtxMagicError(f"Bedrock could not be set up: {error}") from error
    return Backend(client, "bedrock", f"Using Claude on Amazon Bedrock ({client.aws_region}).", provider="bedrock")


def _vertex(env: Mapping[str, str], max_retries: int, region: str, project: str, credentials: Any) -> Backend:
    import anthropic

    where = region or _value(env, "CLOUD_ML_REGION")
    if not where:
        raise CtxMagicError("Vertex needs a region: set CtxMagic.region or CLOUD_ML_REGION (e.g. 'global' or "
                            "'us-east5').")
    if credentials is None:
        try:
            import google.auth  # noqa: F401 - the SDK loads application default credentials with it
        except ImportError as error:
            raise CtxMagicError('Vertex needs google-auth: pip install "ctx_magic[vertex]", then '
                                "gcloud auth application-default login.") from error
    project_id = project or _value(env, "ANTHROPIC_VERTEX_PROJECT_ID", "GOOGLE_CLOUD_PROJECT")
    options: dict[str, Any] = {"project_id": project_id} if project_id else {}
    client = anthropic.AnthropicVertex(region=where, credentials=credentials, max_retries=max_retries,
                                       base_url=_value(env, "ANTHROPIC_VERTEX_BASE_URL"), **options)
    return Backend(client, "vertex", f"Using Claude on Google Vertex AI ({where}).", provider="vertex")
