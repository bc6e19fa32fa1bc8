// Package traces embeds the Mooncake FAST'25 conversation trace (see
// README.md here), the default input of `mooncake replay`.
package traces

import _ "embed"

// Conversation is conversation_trace.jsonl: 12,031 requests over 59 min.
//
//go:embed conversation_trace.jsonl
var Conversation []byte

// ConversationName is the file name reported in errors for Conversation.
const ConversationName = "conversation_trace.jsonl (embedded)"
