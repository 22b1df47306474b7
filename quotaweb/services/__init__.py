"""The write path for user actions: submitting and changing jobs, and configuring capacity
and quota shares.  Forms, the admin and the API all call these functions, so every rule
(docs/semantics.md 2 and 4) and every event is written in one place."""
