"""Rerankers, chosen by name (KNOWLEDGE_RERANKER)."""

from knowledge_api.registry import Registry
from knowledge_api.rerankers.base import Reranker

rerankers: Registry[Reranker] = Registry("reranker", "KNOWLEDGE_RERANKER")
rerankers.register("none", "knowledge_api.rerankers.base:NoReranker")
rerankers.register("cross-encoder", "knowledge_api.rerankers.cross_encoder:CrossEncoderReranker")
rerankers.register("cohere", "knowledge_api.rerankers.cohere:CohereReranker")
rerankers.register("llm", "knowledge_api.rerankers.llm:LLMReranker")
