"""The parts of a decomposed request (gateway/transform_stage.py), answered side by side,
merged into one answer in order: each part's text under its heading, the first part
streamed as it comes, the later ones as soon as the earlier are done.

A failed part reads `[part N failed: ...]` in the merged answer, which then says it must
not be cached (`failed`); if every part fails, the request fails with the first error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.transform_stage import TransformPlan, reason
from openai_api import APIError, ChatCompletionChunk, ChunkChoice, DeltaMessage, Usage, new_id
from prompts import decompose as dec
from prompts.ordered_merge import PartFailed, merge_in_order


class PartMerge:
    """The merged chunks of `parts` (one stream per part of `plan`, in order); `failed`
    counts the parts that failed once the merge is read to its end."""

    def __init__(self, plan: TransformPlan, parts: list[AsyncIterator[ChatCompletionChunk]],
                 model: str) -> None:
        assert plan.decomposition is not None
        self.decomposition = plan.decomposition
        self.parts, self.model = parts, model
        self.failed = 0

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self._merged()

    async def _merged(self) -> AsyncIterator[ChatCompletionChunk]:
        cid, usage, finish = new_id("chatcmpl"), Usage(), "stop"
        pending: list[str] = []  # failed leading parts, held until any part succeeds
        first_error: BaseException | None = None
        started, current = False, -1
        async for item in merge_in_order(self.parts):
            if item.index != current:
                current = item.index
                pending.append(("\n\n" if current else "")
                               + dec.part_heading(self.decomposition, current))
            if isinstance(item, PartFailed):
                self.failed += 1
                first_error = first_error or item.error
                pending.append(f"[part {item.index + 1} failed: {reason(item.error)}]")
                continue
            chunk = item.item
            usage = usage + chunk.usage if chunk.usage else usage
            text = "".join(c.delta.content or "" for c in chunk.choices)
            ended = [c.finish_reason for c in chunk.choices if c.finish_reason]
            finish = "length" if "length" in ended else finish
            if not text and not ended:
                continue  # role and usage chunks: the merged answer has its own
            if not started:
                started = True
                yield self._chunk(cid, DeltaMessage(role="assistant", content=""))
            if pending or text:
                yield self._chunk(cid, DeltaMessage(content="".join(pending) + text))
                pending = []
        if not started:
            raise first_error if isinstance(first_error, APIError) else APIError(
                502, f"every part of the decomposed request failed: {reason(first_error)}")
        if pending:
            yield self._chunk(cid, DeltaMessage(content="".join(pending)))
        yield self._chunk(cid, DeltaMessage(), finish)
        yield ChatCompletionChunk(id=cid, model=self.model, choices=[], usage=usage)

    def _chunk(self, cid: str, delta: DeltaMessage,
               finish: str | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=cid, model=self.model,
                                   choices=[ChunkChoice(delta=delta, finish_reason=finish)])
