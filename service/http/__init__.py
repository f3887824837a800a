"""The HTTP edge: request bodies and heads, admission and cost, hang-ups, problem+json, headers, OpenAPI and docs."""
