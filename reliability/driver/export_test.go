package driver

// RetryFor is how long the head of a Sender's backlog waits for room
// before its transfer fails with sdr.ErrRetry (TestDriverSendBacklog).
const RetryFor = retryFor
