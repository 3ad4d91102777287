"""The synthesis chain: links tried in order (KNOWLEDGE_SYNTHESIZER), the first that
answers wins; the offline extractive link is always last, so an answer always comes.

A link is skipped when it cannot run (no API key) and abandoned when it fails: an
error, no first piece within its timeout, a gap longer than its timeout, or no text
at all. After `breaker_failures` failures in a row its circuit opens: the link is
skipped without a call for `breaker_cooldown` seconds, so a hanging provider does not
cost every request its timeout; then one request tries it again (the others keep
skipping it meanwhile), and a success closes the circuit.

When a link fails after it had streamed text, the chain sends a `reset` event (the
client drops that text) before the next link starts, so text is never repeated.
Every streamed piece passes through a CitationFilter: a citation of a passage that
does not exist never reaches the client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from knowledge_api import tracing
from knowledge_api.errors import ConfigurationError
from knowledge_api.grounding import CitationFilter
from knowledge_api.models import Outcome, SearchHit
from knowledge_api.observer import UNOBSERVED, Observer
from knowledge_api.synthesis import synthesizers
from knowledge_api.synthesis.base import Prompt, ProviderError, Synthesizer, Usage
from knowledge_api.synthesis.prompt import build_prompt

log = logging.getLogger("knowledge_api.synthesis")
LAST_LINK = "extractive"
Event = tuple[str, Any]


@dataclass(slots=True)
class LinkState:
    failures: int = 0
    """In a row; a success starts again from 0."""
    error: str = ""
    failed_at: str = ""
    open_until: float = 0.0
    """Clock time before which the link is skipped (its circuit is open)."""


@dataclass(eq=False)
class SynthesisChain:
    links: list[Synthesizer]
    subject: str = ""
    context_chars: int = 6400
    breaker_failures: int = 3
    breaker_cooldown: float = 30.0
    clock: Callable[[], float] = time.monotonic
    deadline: float | None = None
    """Seconds the LLM links may take for the whole answer, together; past it the
    chain moves on to the offline link (None: no overall limit)."""
    states: dict[str, LinkState] = field(init=False)
    observer: Observer = field(default=UNOBSERVED, init=False)

    def __post_init__(self) -> None:
        self.links = list(self.links)
        self.states = {link.name: LinkState() for link in self.links}

    @classmethod
    def from_settings(cls, settings: Any) -> SynthesisChain:
        names = [name.strip() for name in settings.synthesizer.split(",") if name.strip()]
        if not names or names[-1] != LAST_LINK or names.count(LAST_LINK) > 1:
            raise ConfigurationError(
                f"KNOWLEDGE_SYNTHESIZER={settings.synthesizer!r}: the chain must end with "
                f"{LAST_LINK} (the offline link that always answers), and name it once"
            )
        if len(set(names)) != len(names):
            raise ConfigurationError(f"KNOWLEDGE_SYNTHESIZER names a link twice: {names}")
        links = [synthesizers.create(name, settings) for name in names]
        return cls(
            links,
            settings.llm_subject,
            settings.llm_context_chars,
            settings.llm_breaker_failures,
            settings.llm_breaker_cooldown,
            deadline=settings.synthesis_deadline,
        )

    async def open(self) -> None:
        for link in self.links:
            await link.open()

    async def close(self) -> None:
        for link in self.links:
            await link.close()

    async def stream(self, query: str, hits: Sequence[SearchHit]) -> AsyncGenerator[Event, None]:
        """("delta", text)* with ("reset", why) after a failure mid-stream, then
        ("done", Outcome)."""
        prompt = build_prompt(query, hits, self.subject, self.context_chars)
        loop = asyncio.get_running_loop()
        ends = None if self.deadline is None else loop.time() + self.deadline
        skipped: list[dict[str, str]] = []
        failed: list[str] = []
        for link in self.links:
            reason = link.unavailable()
            if reason is None and not prompt.hits and link is not self.links[-1]:
                reason = "no passage to answer from"
            if reason:
                skipped.append({"provider": link.name, "reason": reason})
                traced_skip(link, reason)
                continue
            if ends is not None and link is not self.links[-1] and loop.time() >= ends:
                why = f"skipped: the synthesis deadline of {self.deadline:g} s has passed"
                skipped.append({"provider": link.name, "reason": why})
                failed.append(f"{link.name} {why}")
                traced_skip(link, why)
                continue
            if circuit := self._circuit_open(link):
                skipped.append({"provider": link.name, "reason": circuit})
                failed.append(f"{link.name} {circuit}")
                traced_skip(link, circuit)
                continue
            citations = CitationFilter(len(prompt.hits))
            usage = Usage()
            parts: list[str] = []
            started = time.perf_counter()
            # the link's span is current only while the link works: the stream yields
            # to its reader in between
            attempt = tracing.start("knowledge.synthesis.link", link_attributes(link))
            try:
                last = link is self.links[-1]  # the offline link always gets to answer
                generated = within(
                    tracing.pulled(attempt, link.generate(prompt, usage)),
                    link.timeout,
                    None if last else ends,
                )
                async with aclosing(generated) as pieces:
                    async for piece in pieces:
                        if passed := citations.feed(piece):
                            parts.append(passed)
                            yield "delta", passed
                if not "".join(parts).strip():
                    raise ProviderError("the answer was empty")
            except Exception as e:
                self.observer.synthesis(link.name, time.perf_counter() - started)
                why = self._failed(link, e)
                skipped.append({"provider": link.name, "reason": why})
                failed.append(f"{link.name} {why}")
                attempt.set_attributes(
                    {"error.type": type(e).__name__, "knowledge.synthesis.fallback_reason": why}
                )
                tracing.failed(attempt, why)
                attempt.end()
                if parts:
                    yield "reset", {"provider": link.name, "reason": why}
                continue
            except BaseException:
                attempt.end()  # the reader left (GeneratorExit) or was cancelled
                raise
            if rest := citations.finish():
                parts.append(rest)
                yield "delta", rest
            self.observer.synthesis(link.name, time.perf_counter() - started)
            self.states[link.name] = LinkState()
            if usage.tokens is not None:
                attempt.set_attribute("knowledge.synthesis.tokens_used", usage.tokens)
            if skipped:
                fallback = "; ".join(f"{s['provider']} {s['reason']}" for s in skipped)
                attempt.set_attribute("knowledge.synthesis.fallback_reason", fallback)
            attempt.set_attribute("knowledge.synthesis.citations", len(citations.cited))
            attempt.end()
            yield (
                "done",
                Outcome(
                    text="".join(parts).strip(),
                    provider=link.name,
                    model=link.model,
                    temperature=link.temperature,
                    tokens_used=usage.tokens,
                    passages=prompt.hits,
                    citations=sorted(citations.cited),
                    citations_removed=citations.removed,
                    skipped=skipped,
                    failed=failed,
                ),
            )
            return
        raise RuntimeError(f"no link of the synthesis chain answered: {skipped}")

    def ready_link(self) -> Synthesizer | None:
        """The first LLM link that may be called now, for work outside an answer (such
        as reranking): it has what it needs and its circuit is closed, or this caller
        is the one that probes it after the cool-down. None when no link is ready; the
        offline last link is never one."""
        for link in self.links[:-1]:
            if link.unavailable() is None and self._circuit_open(link) is None:
                return link
        return None

    async def written(self, link: Synthesizer, query: str, text: str) -> str:
        """What `link` writes for the prompt `text` (no passages), whole, each piece
        within the link's timeout."""
        parts: list[str] = []
        prompt = Prompt(query=query, hits=(), text=text)
        async with aclosing(within(link.generate(prompt, Usage()), link.timeout)) as pieces:
            async for piece in pieces:
                parts.append(piece)
        return "".join(parts)

    @staticmethod
    def why(link: Synthesizer, error: Exception) -> str:
        """How `link` failed, in words (`failed: ...`)."""
        return describe(error, link.timeout)

    def record(self, link: Synthesizer, error: Exception | None) -> None:
        """The outcome of a call to `link` made outside the chain: a provider that fails
        there opens its circuit for answers too, and one that answers closes it."""
        if error is None:
            self.states[link.name] = LinkState()
        else:
            self._failed(link, error)

    def _circuit_open(self, link: Synthesizer) -> str | None:
        """Why a link that keeps failing is skipped without a call; None to call it.
        Past the cool-down the caller probes it, and the circuit stays open to others
        until that probe ends (a failure re-opens it, a success resets the state)."""
        state = self.states[link.name]
        if link is self.links[-1] or not self.tripped(state):
            return None
        now = self.clock()
        if now < state.open_until:
            return (
                f"skipped: circuit open after {state.failures} failures in a row, "
                f"next try in {state.open_until - now:.0f} s"
            )
        state.open_until = now + self.breaker_cooldown
        return None

    def tripped(self, state: LinkState) -> bool:
        return 0 < self.breaker_failures <= state.failures

    def circuit_open(self, name: str) -> bool:
        """Whether calls to the link are skipped now (false again once it may be probed)."""
        state = self.states[name]
        return self.tripped(state) and self.clock() < state.open_until

    def _failed(self, link: Synthesizer, error: Exception) -> str:
        why = describe(error, link.timeout, self.deadline)
        state = LinkState(
            self.states[link.name].failures + 1,
            why,
            datetime.now(UTC).isoformat(timespec="seconds"),
        )
        if self.tripped(state):
            state.open_until = self.clock() + self.breaker_cooldown
        self.states[link.name] = state
        self.observer.provider_failure(link.name)
        log.warning("synthesis by %s %s", link.name, why)
        return why

    def health(self) -> dict[str, Any]:
        providers = {link.name: self._link_health(link) for link in self.links}
        failing = any(p["status"] == "failing" for p in providers.values())
        return {
            "name": "chain",
            "status": "degraded" if failing else "ok",
            "chain": [link.name for link in self.links],
            "providers": providers,
        }

    def _link_health(self, link: Synthesizer) -> dict[str, Any]:
        report = link.health()
        state = self.states[link.name]
        if report.get("status") == "configured" and state.error:
            report.update(status="failing", error=state.error, failed_at=state.failed_at)
            report["consecutive_failures"] = state.failures
            if self.tripped(state):
                retry_in = max(0.0, state.open_until - self.clock())
                report.update(circuit="open", retry_in_s=round(retry_in, 1))
        return report


def link_attributes(link: Synthesizer) -> dict[str, Any]:
    """A link's span attributes (the GenAI semantic conventions' chat)."""
    if not tracing.recording():
        return {}
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": link.name,
        "gen_ai.request.model": link.model,
        "gen_ai.request.temperature": link.temperature,
    }
    if max_tokens := getattr(link, "max_tokens", None):
        attributes["gen_ai.request.max_tokens"] = max_tokens
    return attributes


def traced_skip(link: Synthesizer, reason: str) -> None:
    """A link the chain did not call, as a short span saying why."""
    if tracing.recording():
        attributes = {**link_attributes(link), "knowledge.synthesis.skipped": reason}
        with tracing.span("knowledge.synthesis.link", attributes):
            pass


class DeadlineReached(TimeoutError):
    """The whole answer took longer than the synthesis deadline."""


async def within(
    pieces: AsyncGenerator[str, None], timeout: float | None, ends: float | None = None
) -> AsyncGenerator[str, None]:
    """The pieces, failing with TimeoutError when one takes longer than `timeout`, and
    with DeadlineReached when loop time `ends` comes first. Closing this iterator (a
    client went away) closes the provider's stream."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            limit = None if timeout is None else loop.time() + timeout
            if ends is not None and (limit is None or ends < limit):
                if loop.time() >= ends:
                    raise DeadlineReached()
                limit = ends
            try:
                async with asyncio.timeout_at(limit):
                    piece = await anext(pieces, None)
            except TimeoutError:
                if ends is not None and loop.time() >= ends:
                    raise DeadlineReached() from None
                raise
            if piece is None:
                return
            yield piece
    finally:
        await pieces.aclose()


def describe(error: Exception, timeout: float | None, deadline: float | None = None) -> str:
    if isinstance(error, DeadlineReached):
        return f"failed: the answer was not done within the synthesis deadline of {deadline:g} s"
    if isinstance(error, TimeoutError):
        return f"failed: no answer within {timeout:g} s"
    if isinstance(error, ProviderError):
        return f"failed: {error}"
    return f"failed: {type(error).__name__}: {error}"[:300]
