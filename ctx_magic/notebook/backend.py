"""Which server answers the agent: Claude through Anthropic's API, Amazon Bedrock or Google
Vertex AI (the `provider` setting), or, with no Anthropic key, the offline stand-in. Chosen
here, at the top, so the agent package never knows the stand-in exists.

Each provider goes through the anthropic SDK's own client with that provider's usual
credentials: ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL); for Bedrock the AWS credential chain
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE or the `aws_profile`
setting, a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK) and AWS_REGION or the `region` setting
(`pip install "anthropic[bedrock]"`); for Vertex Google's application default credentials
(`gcloud auth application-default login`, `pip install "anthropic[vertex]"`), CLOUD_ML_REGION or
`region`, ANTHROPIC_VERTEX_PROJECT_ID or `project`. ANTHROPIC_BEDROCK_BASE_URL and
ANTHROPIC_VERTEX_BASE_URL point a provider's client elsewhere (a proxy, the stand-in in tests).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.errors import CtxMagicError
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import offline_client
from ctx_magic.settings import MAX_RETRIES, PROVIDER

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
    provider: str = PROVIDER
    """Whose request shapes the client speaks: anthropic, bedrock or vertex (model ids, counting)."""

    @property
    def offline(self) -> bool:
        return self.stand_in is not None

    def with_retries(self, max_retries: int) -> Backend:
        return Backend(self.client.with_options(max_retries=max_retries), self.name, self.notice, self.stand_in,
                       self.provider)


def choose_backend(env: Mapping[str, str] | None = None, *, max_retries: int = MAX_RETRIES,
                   offline_window: int = OFFLINE_WINDOW, provider: str = PROVIDER, region: str = "",
                   project: str = "", aws_profile: str = "", vertex_credentials: Any = None) -> Backend:
    """The client for `provider`. For Anthropic: the real API when ANTHROPIC_API_KEY is set
    (ANTHROPIC_BASE_URL honored), else the stand-in. A base URL without a key is refused:
    silently answering from the stand-in instead of the server someone pointed ctx_magic at would
    be a surprise. `vertex_credentials` replaces Google's default credentials (tests)."""
    env = os.environ if env is None else env
    if provider == "bedrock":
        return _bedrock(env, max_retries, region, aws_profile)
    if provider == "vertex":
        return _vertex(env, max_retries, region, project, vertex_credentials)
    import anthropic

    key = env.get("ANTHROPIC_API_KEY", "").strip()
    base_url = env.get("ANTHROPIC_BASE_URL", "").strip() or None
    if key:
        client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=max_retries)
        where = f" at {base_url}" if base_url else ""
        return Backend(client, "anthropic", f"Using the Anthropic Messages API{where}.")
    if base_url:
        raise CtxMagicError(f"ANTHROPIC_BASE_URL is set ({base_url}) but ANTHROPIC_API_KEY is not: set the key to "
                            "use that server, or unset ANTHROPIC_BASE_URL to use the offline stand-in.")
    stand_in = OfflineAPI(OfflineConfig(window=offline_window))
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
        raise CtxMagicError('Bedrock needs boto3: pip install "anthropic[bedrock]".') from error
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
            raise CtxMagicError('Vertex needs google-auth: pip install "anthropic[vertex]", then '
                                "gcloud auth application-default login.") from error
    project_id = project or _value(env, "ANTHROPIC_VERTEX_PROJECT_ID", "GOOGLE_CLOUD_PROJECT")
    options: dict[str, Any] = {"project_id": project_id} if project_id else {}
    client = anthropic.AnthropicVertex(region=where, credentials=credentials, max_retries=max_retries,
                                       base_url=_value(env, "ANTHROPIC_VERTEX_BASE_URL"), **options)
    return Backend(client, "vertex", f"Using Claude on Google Vertex AI ({where}).", provider="vertex")
