"""Compaction on demand: the API writes the summary.

Where the model and its provider take it (agent/catalog.compacts_on_demand), a summary
compaction sends the messages it summarizes exactly as the main call sends them (the same
system prompt, tools, thinking and cache breakpoints, so the conversation is read from the
cache) with the top-level `compaction` parameter, ctx_magic's summary prompt as its
`instructions` (a model that thinks walks through the conversation in its thinking: the block
is kept whole, so it asks for no analysis in it), and the beta header. The answer is one
compaction block, alone, stop reason `compaction`: it goes back first in `messages`, byte for
byte, in place of what it summarizes. On a model with preserved thinking the API's check
accepts a summary it wrote, so no call of ctx_magic's own is needed and what follows keeps
valid thinking. Every later request that carries the block carries the beta header too
(RequestFrame.build).

A summary block the API later refuses goes as text from then on (summaries_back.SummaryBlocks).

When it cannot be had (the conversation does not fit whole, the API refused the parameter or
the request as too long, the answer held no summary) `summarize` says why (`Unavailable`): the
caller writes the summary itself, as for a model without it. A refusal (a 4xx other than a
prompt too long or a thinking block refused) is remembered: the session does not ask again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctx_magic.agent.catalog import compacts_on_demand
from ctx_magic.agent.model import ModelRequest, stream_reply
from ctx_magic.agent.request import CallSetup, RequestFrame
from ctx_magic.agent.request_body import thinks_up_front
from ctx_magic.agent.side_calls import MEASURED_MARGIN_SHARE
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.context.autocompact import Split
from ctx_magic.context.prompts import for_thinking_model
from ctx_magic.context.server import ON_DEMAND_BETA
from ctx_magic.context.tokens import Correction, count_context, count_text
from ctx_magic.errors import (
    ModelError,
    PromptTooLong,
    RequestTooLarge,
    SummaryBlockRefused,
    ThinkingRefused,
    UnknownModel,
)
from ctx_magic.messages import THINKING_TYPES, Block, Message

NO_CORRECTION = Correction()
REFUSALS = (RequestTooLarge, UnknownModel)  # with a plain ModelError: the API said no to the request itself


@dataclass(frozen=True)
class Unavailable:
    """Why the API wrote no summary this time; `refused`: it refused the request (said in one line)."""

    reason: str
    refused: bool = False


class OnDemand:
    """One session's on-demand compactions: whether to ask, and the asking."""

    def __init__(self, frame: RequestFrame, meter: UsageMeter, notice: Callable[[str, str], None], *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._frame = frame
        self._meter = meter
        self._notice = notice
        self._sleep = sleep
        self.refusal: str | None = None
        """What the API answered when it refused on-demand compaction in this session (None: it did not)."""
        self.busy = False
        """The API is writing a summary: as for ctx_magic's own, no auto-compaction is decided meanwhile."""

    def available(self, setup: CallSetup) -> bool:
        """Whether a summary compaction asks the API for it: a model and provider that take it,
        the 'client' strategy (a request may not carry both `compaction` and the server's edits),
        and no refusal yet."""
        model = self._frame.model
        return (self.refusal is None and setup.server is None
                and compacts_on_demand(model.name, model.provider))

    def summary(self, split: Split, setup: CallSetup, prompt: str, correction: Correction) -> Block | None:
        """The API's own summary of the split's messages, sent as the main call sends them, with
        ctx_magic's summary prompt as its instructions; None where the model or provider does not
        take it, or the API wrote none (a refusal said in one line): ctx_magic then writes the
        summary itself."""
        if not self.available(setup):
            return None
        self.busy = True  # as for a summary of ctx_magic's own: nothing is decided meanwhile
        try:
            answer = self.summarize(split.to_summarize, setup, prompt, correction)
        finally:
            self.busy = False
        if isinstance(answer, Unavailable):
            if answer.refused:
                self._notice(f"The API refused to write the summary itself ({answer.reason}); ctx_magic "
                             "writes it instead, for the rest of this session.", "info")
            return None
        return answer

    def request(self, messages: Sequence[Message], setup: CallSetup, instructions: str) -> ModelRequest:
        """The main call's request for `messages`, asking for the summary alone."""
        request = self._frame.build(messages, setup, purpose="compact")
        betas = request.betas if ON_DEMAND_BETA in request.betas else (*request.betas, ON_DEMAND_BETA)
        return dataclasses.replace(request, compaction={"type": "summarize", "instructions": instructions},
                                   betas=betas)

    def summarize(self, messages: Sequence[Message], setup: CallSetup, instructions: str,
                  correction: Correction = NO_CORRECTION) -> Block | Unavailable:
        """The API's compaction block for `messages`, as it returned it, or why there is none.
        Sent only when they fit whole beside the reply (by the estimate under `correction`, with
        the side calls' margin): ctx_magic's own summary can cut them, this request cannot."""
        if thinks_up_front(setup.window):
            instructions = for_thinking_model(instructions)  # its walk through the conversation is its thinking
        window = setup.window
        measured = count_context([m for m in messages if m.sent], overhead_tokens=setup.overhead_tokens,
                                 correction=correction).tokens
        asked = count_text(instructions) * max(1.0, correction.ratio)
        if measured + asked > window.tokens * (1 - MEASURED_MARGIN_SHARE) - window.max_tokens:
            return Unavailable("the conversation does not fit whole beside the summary")
        request = self.request(messages, setup, instructions)
        if _continues_unthought(request):
            return Unavailable("with thinking enabled, a request ending with an answer that opens without thinking "
                               "is read as a prefill the API refuses")
        try:
            reply = stream_reply(self._frame.model, request, sleep=self._sleep)
        except (PromptTooLong, ThinkingRefused) as error:  # the client's summary has its own way through both
            return Unavailable(str(error))
        except SummaryBlockRefused as error:  # an earlier summary of the API's: it goes as text, ctx_magic's own next
            self._frame.summaries.refuse(error)
            return Unavailable(str(error))
        except ModelError as error:
            if type(error) is ModelError or isinstance(error, REFUSALS):
                self.refusal = str(error)
                return Unavailable(str(error), refused=True)
            return Unavailable(str(error))
        self._meter.add(reply.usage)
        block = reply.content[0] if len(reply.content) == 1 else {}
        if reply.stop_reason != "compaction" or block.get("type") != "compaction" or not block.get("content"):
            return Unavailable(f"the API's answer held no summary (stop reason {reply.stop_reason})")
        return dict(block)


def _continues_unthought(request: ModelRequest) -> bool:
    """With a thinking budget (`enabled`), a request whose last message is an answer must open it
    with thinking; an answer written after tool results, where such a model does not think again,
    does not."""
    last = request.messages[-1] if request.messages else {}
    content = last.get("content") or [{}]
    return ((request.thinking or {}).get("type") == "enabled" and last.get("role") == "assistant"
            and content[0].get("type") not in THINKING_TYPES)
