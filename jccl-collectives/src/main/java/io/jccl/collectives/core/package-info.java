/**
 * Internal: what both of a communicator's paths share: the operation's {@link io.jccl.collectives.core.Signature},
 * how its waits behave ({@link io.jccl.collectives.core.WaitPolicy}) and how vectors split into blocks. Not API;
 * may change without notice.
 */
package io.jccl.collectives.core;
