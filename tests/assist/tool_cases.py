"""The tools the tool tests share (test_tools, test_tools_engine, test_tools_server): a helper
module, not a test file.  ``WEATHER`` and ``ADD``, two functions as the OpenAI API offers
them; ``PERSON``, a JSON schema; ``ORDER``, a tool whose parameters use $defs/$ref as Pydantic
writes them; ``METHODS``, every drafting method."""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False},
    },
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0},
                   "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
METHODS = ("none", "chain", "specinfer", "rrs", "resispec", "auto")


ORDER = {  # what Pydantic writes for a tool taking an Order with a list of Items
    "type": "function",
    "function": {"name": "place_order", "description": "Place an order", "parameters": {
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 8},
                                                             "qty": {"type": "integer", "minimum": 1}},
                           "required": ["sku", "qty"], "additionalProperties": False}},
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1, "maxItems": 2},
                       "note": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]}},
        "required": ["items", "note"], "additionalProperties": False}},
}
