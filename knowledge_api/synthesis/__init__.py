"""Synthesizers, chosen by name (KNOWLEDGE_SYNTHESIZER)."""

from knowledge_api.registry import Registry
from knowledge_api.synthesis.base import Synthesizer

synthesizers: Registry[Synthesizer] = Registry("synthesizer", "KNOWLEDGE_SYNTHESIZER")
synthesizers.register("extractive", "knowledge_api.synthesis.extractive:ExtractiveSynthesizer")
synthesizers.register("gemini", "knowledge_api.synthesis.gemini:GeminiSynthesizer")
synthesizers.register("groq", "knowledge_api.synthesis.groq:GroqSynthesizer")
synthesizers.register("openai", "knowledge_api.synthesis.openai:OpenAISynthesizer")
