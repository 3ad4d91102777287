"""LLM provider and cloud embedder settings: keys, endpoints, models, limits."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_api.config.fields import RATIO, Secret, setting


@dataclass(frozen=True)
class ProviderSettings:
    gemini_api_key: Secret = setting(
        "GOOGLE_GENERATIVE_AI_API_KEY", Secret(""), "Gemini API key (synthesis, gemini embedder)."
    )
    groq_api_key: Secret = setting("GROQ_API_KEY", Secret(""), "Groq API key (synthesis).")
    openai_api_key: Secret = setting(
        "KNOWLEDGE_OPENAI_API_KEY",
        Secret(""),
        "Key of the openai link, sent to KNOWLEDGE_OPENAI_BASE_URL (OpenAI, Azure OpenAI, "
        "a gateway); a server of one's own needs none.",
    )
    openai_platform_key: Secret = setting(
        "OPENAI_API_KEY",
        Secret(""),
        "OpenAI's key: the openai link's when KNOWLEDGE_OPENAI_API_KEY is not set, sent "
        "to OpenAI's own API only.",
    )
    cohere_api_key: Secret = setting(
        "COHERE_API_KEY", Secret(""), "Cohere API key (cohere embedder and reranker)."
    )
    gemini_base_url: str = setting(
        "KNOWLEDGE_GEMINI_BASE_URL",
        "https://generativelanguage.googleapis.com",
        "Gemini API endpoint (a proxy, gateway or regional endpoint).",
    )
    groq_base_url: str = setting(
        "KNOWLEDGE_GROQ_BASE_URL", "https://api.groq.com", "Groq API endpoint."
    )
    openai_base_url: str = setting(
        "KNOWLEDGE_OPENAI_BASE_URL",
        "https://api.openai.com/v1",
        "Endpoint of the openai link: OpenAI's API, any OpenAI-compatible server (Ollama, "
        "vLLM, llama.cpp, LM Studio, OpenRouter), or the Azure OpenAI endpoint.",
    )
    openai_api_version: str = setting(
        "KNOWLEDGE_OPENAI_API_VERSION",
        "",
        "Azure OpenAI's api-version: set, the openai link speaks to Azure (the base URL is "
        "the resource's endpoint, the model its deployment).",
    )
    cohere_base_url: str = setting(
        "KNOWLEDGE_COHERE_BASE_URL", "https://api.cohere.com", "Cohere API endpoint."
    )
    gemini_model: str = setting(
        "KNOWLEDGE_GEMINI_MODEL", "gemini-2.0-flash", "Gemini model that writes answers."
    )
    groq_model: str = setting(
        "KNOWLEDGE_GROQ_MODEL", "llama-3.3-70b-versatile", "Groq model that writes answers."
    )
    openai_model: str = setting(
        "KNOWLEDGE_OPENAI_MODEL",
        "gpt-4o-mini",
        "Model of the openai link (on Azure, the deployment's name).",
    )
    gemini_timeout: float = setting(
        "KNOWLEDGE_GEMINI_TIMEOUT",
        5.0,
        "Seconds Gemini may take to its first token, and between tokens, before the chain "
        "moves on.",
        positive=True,
    )
    groq_timeout: float = setting(
        "KNOWLEDGE_GROQ_TIMEOUT", 5.0, "The same limit for Groq.", positive=True
    )
    openai_timeout: float = setting(
        "KNOWLEDGE_OPENAI_TIMEOUT", 5.0, "The same limit for the openai link.", positive=True
    )
    gemini_max_tokens: int = setting(
        "KNOWLEDGE_GEMINI_MAX_TOKENS", 500, "Most output tokens of a Gemini answer.", positive=True
    )
    groq_max_tokens: int = setting(
        "KNOWLEDGE_GROQ_MAX_TOKENS", 500, "Most output tokens of a Groq answer.", positive=True
    )
    openai_max_tokens: int = setting(
        "KNOWLEDGE_OPENAI_MAX_TOKENS",
        500,
        "Most output tokens of an answer of the openai link.",
        positive=True,
    )
    llm_temperature: float = setting(
        "KNOWLEDGE_LLM_TEMPERATURE",
        0.3,
        "Sampling temperature of the LLM links (0-2).",
        min=0,
        max=2,
    )
    llm_context_chars: int = setting(
        "KNOWLEDGE_LLM_CONTEXT_CHARS",
        6400,
        "Most characters of results an answer is written from (the citable passages).",
        positive=True,
    )
    llm_subject: str = setting(
        "KNOWLEDGE_LLM_SUBJECT",
        "AOMA (Asset and Offering Management Application)",
        "What the prompt says the assistant helps with.",
    )
    gemini_embedding_model: str = setting(
        "KNOWLEDGE_GEMINI_EMBEDDING_MODEL",
        "gemini-embedding-001",
        "Model of the gemini embedder (768-d vectors).",
    )
    cohere_embedding_model: str = setting(
        "KNOWLEDGE_COHERE_EMBEDDING_MODEL",
        "embed-english-v3.0",
        "Model of the cohere embedder (1024-d vectors).",
    )
    cloud_embedding_timeout: float = setting(
        "KNOWLEDGE_CLOUD_EMBEDDING_TIMEOUT",
        30.0,
        "Seconds one request of the gemini or cohere embedder may take.",
        positive=True,
    )
    synthesis_deadline: float = setting(
        "KNOWLEDGE_SYNTHESIS_DEADLINE",
        15.0,
        "Seconds the LLM links may take for a whole answer, together; past it the chain "
        "moves on to the offline link (and says so in warnings).",
        positive=True,
    )
    llm_breaker_failures: int = setting(
        "KNOWLEDGE_LLM_BREAKER_FAILURES",
        3,
        "Failures in a row after which an LLM provider's circuit opens: it is skipped "
        "without a call for KNOWLEDGE_LLM_BREAKER_COOLDOWN seconds (0 = never).",
        min=0,
    )
    llm_breaker_cooldown: float = setting(
        "KNOWLEDGE_LLM_BREAKER_COOLDOWN",
        30.0,
        "Seconds an open circuit skips its provider before one request tries it again.",
        positive=True,
    )
    answer_threshold: str = setting(
        "KNOWLEDGE_ANSWER_THRESHOLD",
        "auto",
        "Default similarity a passage needs to ground an answer (POST /v1/knowledge/answer): "
        "a number 0-1, or auto for the embedder's own (0.4 for the local model, 0.7 otherwise).",
        choices=("auto",),
        form=RATIO,
    )
