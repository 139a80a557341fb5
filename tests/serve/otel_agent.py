"""An agent instrumented as users instrument theirs: the official openai SDK under
opentelemetry-instrumentation-openai-v2, exporting spans and log events over OTLP/HTTP to
``$OTEL_EXPORTER_OTLP_ENDPOINT``. Its model is ``$OPENAI_BASE_URL`` (a trajforge gateway)."""

import json
import os

from openai import OpenAI
from opentelemetry import _logs, trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

endpoint = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
trace.set_tracer_provider(tracer_provider)
logger_provider = LoggerProvider()
logger_provider.add_log_record_processor(
    BatchLogRecordProcessor(OTLPLogExporter(f"{endpoint}/v1/logs"))
)
_logs.set_logger_provider(logger_provider)
OpenAIInstrumentor().instrument()

ADD = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
client = OpenAI()
with trace.get_tracer("my-agent").start_as_current_span("invoke_agent adder"):
    messages = [
        {"role": "system", "content": "You add."},
        {"role": "user", "content": "Add 4 and 5 and 6?"},
    ]
    while True:
        reply = client.chat.completions.create(
            model=os.environ["MODEL"], messages=messages, tools=[ADD]
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": json.dumps({"sum": args["a"] + args["b"]}),
                }
            )
tracer_provider.shutdown()
logger_provider.shutdown()
print(message.content)
