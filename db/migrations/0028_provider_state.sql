-- What a model provider needs back with an assistant message on the next
-- turn (agent.State: Anthropic's thinking blocks with their signatures,
-- OpenAI's encrypted reasoning items, Gemini's thought signatures, Bedrock's
-- reasoning content), as {"wire": ..., "data": ...}. NULL when it needs
-- nothing. Kept with the message, so a run resumed after days, on another
-- replica, sends it back exactly.
ALTER TABLE messages ADD COLUMN provider_state jsonb;
