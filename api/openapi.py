"""OpenAPI post-processing: the ingestion endpoints with their auth, and public reads unlocked.

The webhook, callback and forward endpoints are plain Django views (their answer order starts
with the raw body and the credential, CRCR.md), so drf-spectacular cannot see them; they are
described here. Every read of the API is public: a session cookie changes nothing, so the read
operations carry no security requirement (Swagger UI draws no lock on them).
"""

from typing import Any

ERROR_BODY = {
    "type": "object",
    "description": "One error body everywhere (CRCR.md, 'Callback answers').",
    "properties": {
        "ok": {"type": "boolean", "enum": [False]},
        "error": {"type": "string", "description": "a stable error code"},
        "detail": {"type": "string", "description": "a sentence saying why"},
        "field": {"type": "string", "nullable": True, "description": "the refused field"},
    },
    "required": ["ok", "error", "detail", "field"],
}
STORED = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "enum": [True]},
        "status": {
            "type": "string",
            "enum": ["created", "updated", "duplicate", "stale", "ignored"],
            "description": "what happened to the callback",
        },
        "job": {"type": "integer", "nullable": True, "description": "the stored attempt's id"},
    },
}
SECURITY_SCHEMES = {
    "githubOidc": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "A GitHub Actions OIDC token of the downstream run (audience set by "
        "CRCR_OIDC_AUDIENCE); its `repository` claim names the backend. Each token is "
        "accepted once.",
    },
    "relayBotKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Hud-Internal-Bot",
        "description": "The relay's shared key (HUD_BOT_KEY) for forwarded results.",
    },
    "webhookSignature": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Hub-Signature-256",
        "description": "sha256=HMAC of the raw body with the GitHub App's webhook secret.",
    },
}


def _answers(success: dict[str, Any], *errors: tuple[int, str]) -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/IngestionError"}}}
    answers = {"200": {"description": "accepted", "content": {"application/json": success}}}
    answers.update({str(code): {"description": why, "content": error} for code, why in errors})
    return answers


def _body(description: str) -> dict[str, Any]:
    return {
        "required": True,
        "description": description,
        "content": {"application/json": {"schema": {"type": "object"}}},
    }


COMMON_ERRORS = (
    (400, "the body or a header is unusable; `field` names it"),
    (413, "the body is over the size cap"),
    (503, "the database is unavailable; retry after Retry-After seconds"),
)
INGESTION_PATHS = {
    "/github/webhook": {
        "post": {
            "operationId": "github_webhook",
            "tags": ["ingestion"],
            "summary": "Upstream GitHub App webhook",
            "description": "Stored once per delivery GUID; pull_request, push and label events "
            "are dispatched to the allowlisted backends (CRCR.md, 'Dispatch'). Headers "
            "X-GitHub-Event and X-GitHub-Delivery are required.",
            "security": [{"webhookSignature": []}],
            "requestBody": _body("The GitHub webhook payload, byte for byte as signed."),
            "responses": _answers(
                {"schema": {"type": "object"}},
                *COMMON_ERRORS,
                (401, "the signature does not match"),
            ),
        }
    },
    "/github/callback": {
        "post": {
            "operationId": "github_callback",
            "tags": ["ingestion"],
            "summary": "A downstream job reports in_progress or completed",
            "description": "The callback body of CRCR.md ('Callback'); also at /github/callback/.",
            "security": [{"githubOidc": []}],
            "requestBody": _body("The callback body (CRCR.md, 'Callback')."),
            "responses": _answers(
                {"schema": STORED},
                *COMMON_ERRORS,
                (401, "the OIDC token is missing, invalid, expired or already used"),
                (403, "the token's repository is not an allowlisted backend"),
                (409, "the callback contradicts its dispatch"),
                (429, "the backend is over its rate limit; retry after Retry-After seconds"),
            ),
        }
    },
    "/api/crcr/results": {
        "post": {
            "operationId": "relay_forward",
            "tags": ["ingestion"],
            "summary": "The relay forwards a verified callback with its metrics",
            "security": [{"relayBotKey": []}],
            "requestBody": _body("A verified callback with the relay's trusted values."),
            "responses": _answers(
                {"schema": STORED},
                *COMMON_ERRORS,
                (401, "the bot key is missing or wrong"),
                (403, "the backend is not allowlisted"),
            ),
        }
    },
}


def document_ingestion(result: dict[str, Any], generator: Any, **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular hook: add the ingestion endpoints and drop locks from public reads."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if {} in operation.get("security", []):
                operation.pop("security")
    result["paths"] = {**INGESTION_PATHS, **result.get("paths", {})}
    components = result.setdefault("components", {})
    components["securitySchemes"] = SECURITY_SCHEMES
    components.setdefault("schemas", {})["IngestionError"] = ERROR_BODY
    return result
