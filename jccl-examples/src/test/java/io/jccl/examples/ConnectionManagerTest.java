package io.jccl.examples;

import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.ConnectionManager;
import io.jccl.verbs.ConnectionParameters;
import io.jccl.verbs.Context;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** ConnectionManager: the librdmacm-style handshake, private data, and the shared-secret check. */
class ConnectionManagerTest {
    private static final byte[] SECRET = "correct horse".getBytes(StandardCharsets.UTF_8);

    private static ConnectionParameters parameters(byte[] secret, String privateData) {
        return ConnectionParameters.defaults().withSecret(secret)
            .withPrivateData(privateData.getBytes(StandardCharsets.UTF_8)).withHandshakeTimeout(Duration.ofSeconds(3));
    }

    @Test
    void shouldConnectExchangePrivateDataAndCarryTraffic() throws Exception {
        try (Context serverContext = Verbs.device("shm0").open(); Context clientContext = Verbs.device("shm0").open();
             ProtectionDomain serverDomain = serverContext.allocateProtectionDomain();
             ProtectionDomain clientDomain = clientContext.allocateProtectionDomain();
             CompletionQueue serverQueue = serverContext.createCompletionQueue(16);
             CompletionQueue clientQueue = clientContext.createCompletionQueue(16);
             var listener = ConnectionManager.listen(serverDomain,
                 new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))) {
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(QueuePairInitAttributes.of(serverQueue), parameters(SECRET, "from server")));
            ConnectionManager.Connection client = ConnectionManager.connect(clientDomain,
                QueuePairInitAttributes.of(clientQueue), listener.localAddress(), parameters(SECRET, "from client"));
            ConnectionManager.Connection server = accepted.get(10, TimeUnit.SECONDS);
            try (var clientQp = client.queuePair(); var serverQp = server.queuePair()) {
                assertEquals(QueuePairState.READY_TO_SEND, clientQp.state());
                assertEquals(QueuePairState.READY_TO_SEND, serverQp.state());
                assertArrayEquals("from server".getBytes(StandardCharsets.UTF_8), client.remotePrivateData());
                assertArrayEquals("from client".getBytes(StandardCharsets.UTF_8), server.remotePrivateData());
                assertEquals(serverQp.queuePairNumber(), client.remote().queuePairNumber());
                serverQp.postReceive(new ReceiveWorkRequest().wrId(7).noData());
                clientQp.postSend(new SendWorkRequest().wrId(8).opcode(SendOpcode.SEND_WITH_IMM)
                    .flags(SendFlag.SIGNALED).immediateData(42).noData());
                WorkCompletion[] completions = WorkCompletion.array(1);
                assertEquals(1, serverQueue.poll(completions, 1, TimeUnit.SECONDS.toNanos(10)));
                assertEquals(WorkCompletionOpcode.RECV, completions[0].opcode());
                assertEquals(42, completions[0].immediateData());
                assertEquals(clientQp.queuePairNumber(), completions[0].sourceQueuePairNumber());
            }
        }
    }

    @Test
    void shouldRefuseAWrongSecretOnBothSides() throws Exception {
        assertRefused(SECRET, "wrong secret".getBytes(StandardCharsets.UTF_8), "wrong shared secret");
    }

    @Test
    void shouldRefuseAClientWithoutTheSecretTheServerRequires() throws Exception {
        assertRefused(SECRET, null, "requires a shared secret");
    }

    private static void assertRefused(byte[] serverSecret, byte[] clientSecret, String clientMessage)
        throws Exception {
        try (Context context = Verbs.device("shm0").open(); ProtectionDomain domain = context.allocateProtectionDomain();
             CompletionQueue queue = context.createCompletionQueue(16);
             var listener = ConnectionManager.listen(domain, new InetSocketAddress(InetAddress.getLoopbackAddress(),
                 0))) {
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(QueuePairInitAttributes.of(queue), parameters(serverSecret, "")));
            VerbsException refused = assertThrows(VerbsException.class, () -> ConnectionManager.connect(domain,
                QueuePairInitAttributes.of(queue), listener.localAddress(), parameters(clientSecret, "")));
            assertEquals(VerbsException.Reason.REJECTED, refused.reason(), refused.getMessage());
            assertTrue(refused.getMessage().contains(clientMessage), refused.getMessage());
            // The server never hands out a QP to an unauthenticated client: its accept ends at the deadline.
            ExecutionException serverSide = assertThrows(ExecutionException.class,
                () -> accepted.get(10, TimeUnit.SECONDS));
            VerbsException timeout = assertInstanceOf(VerbsException.class, serverSide.getCause());
            assertEquals(VerbsException.Reason.TIMEOUT, timeout.reason(), timeout.getMessage());
        }
    }
}
