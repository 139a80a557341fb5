#!/bin/bash
# A structured reward, as Harbor reads it: /logs/verifier/reward.json's "reward".
if [ "$(cat /app/count.txt 2>/dev/null)" = "$EXPECTED_LINES" ]; then
  echo '{"reward": 1.0}' > /logs/verifier/reward.json
else
  echo '{"reward": 0.0}' > /logs/verifier/reward.json
fi
