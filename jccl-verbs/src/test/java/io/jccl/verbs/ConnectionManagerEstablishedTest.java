package io.jccl.verbs;

import org.junit.jupiter.api.Test;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A client returns a connection only once the listener has taken it. A listener whose accept call ended between its
 * reply and the client's RTU closes its queue pair and the socket; the client used to return a queue pair connected
 * to that closed one (its first request then failed with RETRY_EXC_ERR, found by the feature ingestion ring).
 */
class ConnectionManagerEstablishedTest {
    @Test
    void shouldFailTheClientWhenTheListenerDropsTheHandshakeAfterItsRtu() throws Exception {
        try (ConnectionManagerRig client = new ConnectionManagerRig();
             ConnectionManagerRig server = new ConnectionManagerRig();
             ServerSocket listener = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            long before = client.queuePairs();
            // A listener of the wire format only: hello, request, a reply with a real queue pair in RTS, then the
            // RTU read and the socket closed without the confirmation, as an accept call past its deadline does.
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (Socket s = listener.accept()) {
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    DataOutputStream out = new DataOutputStream(s.getOutputStream());
                    assertEquals(ConnectionManagerRig.MAGIC, in.readInt());
                    in.readBoolean();
                    in.readNBytes(ConnectionManager.NONCE_LENGTH);
                    out.writeInt(ConnectionManagerRig.MAGIC);
                    out.writeBoolean(false);
                    out.write(new byte[ConnectionManager.NONCE_LENGTH]);
                    out.flush();
                    assertEquals(ConnectionManagerRig.REQUEST, in.readInt());
                    Endpoint remote = Endpoint.decode(in.readUTF());
                    in.readInt();
                    in.readInt();
                    in.readNBytes(in.readShort());
                    QueuePair pair = server.domain.createQueuePair(server.init());
                    pair.modify(QueuePairAttributes.toInit().accessFlags(ConnectionParameters.defaults().accessFlags()));
                    pair.modify(QueuePairAttributes.toReadyToReceive(remote));
                    pair.modify(QueuePairAttributes.toReadyToSend(pair.initialPsn()));
                    out.writeInt(ConnectionManagerRig.REPLY);
                    out.writeUTF(pair.localEndpoint().encode());
                    out.writeInt(1);
                    out.writeShort(0);
                    out.flush();
                    assertEquals(ConnectionManagerRig.READY_TO_USE, in.readInt());
                    pair.close();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            VerbsException e = assertThrows(VerbsException.class, () -> ConnectionManager.connect(client.domain,
                client.init(), (InetSocketAddress) listener.getLocalSocketAddress(),
                ConnectionManagerRig.parameters(null, Duration.ofSeconds(20))));
            assertEquals(VerbsException.Reason.CONNECTION, e.reason());
            assertTrue(e.getMessage().contains("closed the handshake after our RTU"), e.getMessage());
            fake.get(20, TimeUnit.SECONDS);
            assertEquals(before, client.queuePairs(), "the failed client left a queue pair behind");
        }
    }

    @Test
    void shouldConfirmAndHandOverAConnectionThroughTheRealListener() throws Exception {
        try (ConnectionManagerRig rig = new ConnectionManagerRig();
             ConnectionManager.ConnectionListener listener = rig.listen()) {
            ConnectionParameters parameters = ConnectionManagerRig.parameters(null, Duration.ofSeconds(20));
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(rig.init(), parameters));
            ConnectionManager.Connection client = ConnectionManager.connect(rig.domain, rig.init(),
                listener.localAddress(), parameters);
            ConnectionManager.Connection server = accepted.get(20, TimeUnit.SECONDS);
            assertEquals(server.queuePair().localEndpoint().encode(), client.remote().encode());
            client.queuePair().close();
            server.queuePair().close();
        }
    }
}
