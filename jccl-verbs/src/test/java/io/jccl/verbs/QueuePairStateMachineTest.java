package io.jccl.verbs;

import io.jccl.verbs.spi.QueuePairStateMachine;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class QueuePairStateMachineTest {
    private static final Endpoint PEER = new Endpoint("shm", "shm0", 0x1234, 0x42, "x");

    @Test
    void shouldAcceptTheClassicResetInitRtrRtsSequence() {
        assertEquals(QueuePairState.INIT,
            QueuePairStateMachine.validate(QueuePairState.RESET, QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE)));
        assertEquals(QueuePairState.READY_TO_RECEIVE,
            QueuePairStateMachine.validate(QueuePairState.INIT, QueuePairAttributes.toReadyToReceive(PEER)));
        assertEquals(QueuePairState.READY_TO_SEND,
            QueuePairStateMachine.validate(QueuePairState.READY_TO_RECEIVE, QueuePairAttributes.toReadyToSend(7)));
    }

    @Test
    void shouldRejectMissingRequiredAttribute() {
        QueuePairAttributes attributes = new QueuePairAttributes().state(QueuePairState.INIT).port(1).pkeyIndex(0);
        VerbsException e = assertThrows(VerbsException.class,
            () -> QueuePairStateMachine.validate(QueuePairState.RESET, attributes));
        assertTrue(e.getMessage().contains("ACCESS_FLAGS"), e.getMessage());
    }

    @Test
    void shouldRejectAttributeNotAllowedInTransition() {
        QueuePairAttributes attributes = QueuePairAttributes.toInit().sqPsn(5);
        VerbsException e = assertThrows(VerbsException.class,
            () -> QueuePairStateMachine.validate(QueuePairState.RESET, attributes));
        assertTrue(e.getMessage().contains("SQ_PSN"), e.getMessage());
    }

    @Test
    void shouldRejectSkippingStates() {
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.RESET,
            QueuePairAttributes.toReadyToReceive(PEER)));
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.INIT,
            QueuePairAttributes.toReadyToSend(1)));
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.ERROR,
            new QueuePairAttributes().state(QueuePairState.READY_TO_SEND)));
    }

    @Test
    void shouldAllowErrorAndResetFromAnyState() {
        for (QueuePairState from : QueuePairState.values()) {
            assertEquals(QueuePairState.ERROR, QueuePairStateMachine.validate(from,
                new QueuePairAttributes().state(QueuePairState.ERROR)));
            assertEquals(QueuePairState.RESET, QueuePairStateMachine.validate(from,
                new QueuePairAttributes().state(QueuePairState.RESET)));
        }
    }

    @Test
    void shouldCheckValueRanges() {
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.READY_TO_RECEIVE,
            QueuePairAttributes.toReadyToSend(1).retryCount(8)));
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.READY_TO_RECEIVE,
            QueuePairAttributes.toReadyToSend(0x1000000)));
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.RESET,
            QueuePairAttributes.toInit().port(2)));
        assertThrows(VerbsException.class, () -> QueuePairStateMachine.validate(QueuePairState.READY_TO_SEND,
            new QueuePairAttributes().currentState(QueuePairState.INIT)));
    }

    @Test
    void shouldRoundTripEndpointRecords() {
        Endpoint endpoint = new Endpoint("tcp", "tcp0", 0xABCDEF, 0x123456, "10.0.0.1:4791/secret");
        assertEquals(endpoint, Endpoint.decode(endpoint.encode()));
        assertThrows(IllegalArgumentException.class, () -> Endpoint.decode("garbage"));
    }

    @Test
    void shouldEnforceLocalWriteForRemoteWriteAndAtomic() {
        assertThrows(VerbsException.class, () -> AccessFlag.validate(AccessFlag.toMask(AccessFlag.REMOTE_WRITE)));
        assertThrows(VerbsException.class, () -> AccessFlag.validate(AccessFlag.toMask(AccessFlag.REMOTE_ATOMIC)));
        AccessFlag.validate(AccessFlag.toMask(AccessFlag.REMOTE_READ));
        AccessFlag.validate(AccessFlag.toMask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
    }
}
