/**
 * The transfer engine (Mooncake's Transfer Engine, NIXL's agents): named memory segments published through the job's
 * store, batches of one-sided READ/WRITE transfers sliced over several queue pairs per peer, a notification to the
 * target once a batch has landed, and errors per transfer. Entry point:
 * {@link io.jccl.services.transfer.TransferEngine}.
 */
package io.jccl.services.transfer;
