/**
 * Internal: how a rank joins a communicator, apart from the collectives: join records (job, host, settings,
 * authentication), the device chosen per peer by capability, and the exchange of queue-pair endpoints through the
 * store. {@link io.jccl.collectives.bootstrap.Bootstrap#join} returns what it built. Not API; may change without
 * notice.
 */
package io.jccl.collectives.bootstrap;
