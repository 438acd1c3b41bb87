// Package analysis measures a rollout's revision with one Prometheus instant
// query and says whether the value is within the check's bound.
//
// It is the rollout's only network seam, kept apart from the rollout's
// state machine so that stays a pure function of spec, status and time. A
// Check is what spec.rollout.analysis.prometheus holds; Evaluate runs it
// once. The rules, each tested against a real Prometheus server:
//
//   - The revision. Every {{revision}} in the query (spaces inside the
//     braces allowed) is replaced by the revision under test (WithRevision)
//     as a PromQL string literal, double-quoted with Go's escapes, which
//     PromQL follows: write errors_total{revision={{revision}}}, not
//     revision="{{revision}}". A placeholder written inside quotes, or one
//     with no revision to put in it, makes the check Invalid, as does a
//     revision that is not valid UTF-8.
//   - One number. The query is instant, at the server's own time. Its
//     answer must be one number: a scalar, or a vector of exactly one float
//     sample. No sample, more than one, a histogram sample, a range vector
//     or a string is Inconclusive, and so is NaN (0/0: nothing to divide).
//     An infinity is a number and is compared like one.
//   - The bound is inclusive, as Flagger's thresholdRange: the value passes
//     MaxValue(m) when it is at most m, and MinValue(m) when at least m. A
//     check has exactly one bound, and it is not NaN.
//   - Bounded time. Each evaluation ends within its timeout (DefaultTimeout,
//     or WithTimeout), which is both the request's deadline and the query
//     timeout Prometheus itself enforces; a shorter deadline on ctx wins.
//   - No labels. Neither a Result nor an error carries a sample's labels,
//     the server's warnings, or the text of an execution error (which can
//     quote series); only the value, the bound, the number of samples and
//     the answer's type. A refused query's message, which quotes only the
//     query its author wrote, is kept, clipped.
//   - Nothing but a measurement passes. Every failure to measure is an
//     *Error, whose Kind says what to do about it: Invalid (the check
//     cannot run as written, nor will it: change it), Unreachable (no
//     answer: connection, timeout, server error; it may answer later) or
//     Inconclusive (an answer that is not one number).
package analysis
