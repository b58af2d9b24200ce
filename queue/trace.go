package queue

// HeaderTraceparent is the NATS header that carries a job's W3C trace
// context (https://www.w3.org/TR/trace-context/), lower case as the
// specification writes it: set by whoever publishes the job (the intake
// gateway sets it on every job), continued by the dispatcher.
const HeaderTraceparent = "traceparent"

// HeaderTracestate carries the vendor part of the trace context, when any.
const HeaderTracestate = "tracestate"
