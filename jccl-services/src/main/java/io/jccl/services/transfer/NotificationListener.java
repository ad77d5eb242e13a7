package io.jccl.services.transfer;

/**
 * Sees notifications as they arrive ({@link TransferEngine#addNotificationListener}), before the engine's queue does.
 * Called on the engine's agent thread (or, for a batch to this rank's own segment, on the thread completing it, under
 * the engine's lock): it must return quickly and must not wait for the engine.
 */
@FunctionalInterface
public interface NotificationListener {
    /**
     * Handles {@code notification}; returns true when it consumed it (it then never reaches
     * {@link TransferEngine#pollNotification}), false to pass it on.
     */
    boolean onNotification(Notification notification);
}
