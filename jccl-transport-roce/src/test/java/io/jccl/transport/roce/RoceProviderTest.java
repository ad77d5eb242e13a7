package io.jccl.transport.roce;

import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.spi.VerbsProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.ServiceLoader;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * roce0 is found through ServiceLoader and by name, is never a default device, opens on the port it is given, and a
 * taken port or a bad setting fails at once with a message that names the variable.
 */
class RoceProviderTest {
    @AfterEach
    void clearProperties() {
        System.clearProperty("jccl.roce.port");
        System.clearProperty("jccl.roce.mtu");
        System.clearProperty("jccl.roce.address");
    }

    @Test
    void shouldBeFoundByServiceLoaderAndByName() {
        boolean found = ServiceLoader.load(VerbsProvider.class).stream()
            .anyMatch(p -> p.type() == RoceProvider.class);
        assertTrue(found, "META-INF/services registers RoceProvider");
        Device device = Verbs.device("roce0");
        assertEquals("roce0", device.name());
        assertEquals("roce", device.providerName());
        assertEquals(LinkLayer.ETHERNET, device.linkLayer());
        assertEquals(RoceProvider.device().guid(), device.guid());
    }

    @Test
    void shouldNotBeADefaultDevice() {
        assertFalse(Verbs.defaultDeviceNames().contains("roce0"));
    }

    @Test
    void shouldOpenOnAFreePortAndSayWhatToDoWhenThePortIsTaken() {
        try (Context first = RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024))) {
            String address = first.query().ports().getFirst().gid();
            int port = Integer.parseInt(address.substring(address.indexOf(':') + 1));
            assertTrue(port > 0, address);
            VerbsException e = assertThrows(VerbsException.class,
                () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", port, 1024)));
            assertEquals(VerbsException.Reason.SYSTEM, e.reason());
            assertTrue(e.getMessage().contains("JCCL_ROCE_PORT"), e.getMessage());
        }
    }

    @Test
    void shouldReadThePortAndMtuSettings() {
        System.setProperty("jccl.roce.port", "24791");
        System.setProperty("jccl.roce.mtu", "4096");
        RoceSettings settings = RoceSettings.fromConfig();
        assertEquals(24791, settings.port());
        assertEquals(4096, settings.pathMtuBytes());
    }

    @Test
    void shouldRejectBadSettingsNamingTheVariable() {
        System.setProperty("jccl.roce.port", "70000");
        IllegalArgumentException port = assertThrows(IllegalArgumentException.class, RoceSettings::fromConfig);
        assertTrue(port.getMessage().contains("JCCL_ROCE_PORT"), port.getMessage());
        System.setProperty("jccl.roce.port", "x");
        assertThrows(IllegalArgumentException.class, RoceSettings::fromConfig);
        System.clearProperty("jccl.roce.port");
        System.setProperty("jccl.roce.mtu", "1500");
        IllegalArgumentException mtu = assertThrows(IllegalArgumentException.class, RoceSettings::fromConfig);
        assertTrue(mtu.getMessage().contains("JCCL_ROCE_MTU"), mtu.getMessage());
        assertThrows(IllegalArgumentException.class, () -> RoceProvider.device().open());
        System.clearProperty("jccl.roce.mtu");
        for (String address : new String[] {"localhost", "0.0.0.0", "::1", "10.0.0.256"}) {
            System.setProperty("jccl.roce.address", address);
            IllegalArgumentException a = assertThrows(IllegalArgumentException.class, RoceSettings::fromConfig,
                address);
            assertTrue(a.getMessage().contains("JCCL_ROCE_ADDRESS"), a.getMessage());
        }
    }
}
