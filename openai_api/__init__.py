"""The OpenAI wire layer that the gateway and the engine's own server both speak: request
and response models, one body parser, one error type and its formatter, and the registry
of generation endpoints and request kinds. It knows nothing of caches, routes or models.

Import the names from the package: `from openai_api import APIError, ChatCompletionRequest`.
"""

from openai_api.errors import (
    ERROR_TYPES,
    APIError,
    ErrorDetail,
    ErrorResponse,
    error_param,
    from_pydantic,
    validation_error,
)
from openai_api.models import (
    DEFAULT_TEMPERATURE,
    MAX_CHOICES,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChoiceLogprobs,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    DeltaMessage,
    FinishReason,
    FunctionCall,
    ModelCard,
    ModelList,
    PromptTokensDetails,
    SamplingFields,
    StreamOptions,
    TokenLogprob,
    ToolCall,
    TopLogprob,
    Usage,
    new_id,
    now,
)
from openai_api.parse import DEFAULT_BODY_LIMIT, parse_body, parse_model, read_body, receive_body
from openai_api.registry import (
    ENDPOINTS,
    Chunk,
    Endpoint,
    GenerationRequest,
    Kind,
    WholeAnswer,
    kind_of,
)
from openai_api.responses import ResponsesRequest
from openai_api.responses_objects import ResponseObject

__all__ = [
    "DEFAULT_BODY_LIMIT", "DEFAULT_TEMPERATURE", "ENDPOINTS", "ERROR_TYPES", "MAX_CHOICES",
    "APIError", "WholeAnswer", "AssistantMessage", "ChatChoice", "ChatCompletion",
    "ChatCompletionChunk", "ChatCompletionRequest", "ChatMessage", "ChoiceLogprobs",
    "ChunkChoice", "Chunk", "Completion", "CompletionChoice", "CompletionLogprobs",
    "CompletionRequest", "DeltaMessage", "Endpoint", "ErrorDetail", "ErrorResponse",
    "FinishReason", "FunctionCall", "GenerationRequest", "Kind", "ModelCard", "ModelList",
    "PromptTokensDetails", "ResponseObject", "ResponsesRequest", "SamplingFields",
    "StreamOptions", "TokenLogprob", "ToolCall", "TopLogprob", "Usage", "error_param",
    "from_pydantic", "kind_of", "new_id", "now", "parse_body", "parse_model", "read_body",
    "receive_body", "validation_error",
]
