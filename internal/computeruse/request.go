package computeruse

import (
	"bytes"
	"encoding/json"
)

// DecodeAnthropic decodes an Anthropic request body strictly: a field the
// executor does not know is an *InputError, never ignored.
func DecodeAnthropic(body []byte) (AnthropicRequest, error) {
	var req AnthropicRequest
	return req, decodeStrict(body, &req, "body")
}

// DecodeOpenAI decodes an OpenAI request body as DecodeAnthropic does.
func DecodeOpenAI(body []byte) (OpenAIRequest, error) {
	var req OpenAIRequest
	return req, decodeStrict(body, &req, "body")
}

// decodeStrict decodes JSON value b into v, refusing fields v does not
// have; field names b in the error.
func decodeStrict(b []byte, v any, field string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return inputErrorf(field, "%v", err)
	}
	return nil
}
