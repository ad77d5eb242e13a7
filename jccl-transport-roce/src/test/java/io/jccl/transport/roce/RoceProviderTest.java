package io.jccl.transport.roce;

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
 * roce0 is found through ServiceLoader and by name, is never a default device, and opening it (data path not yet
 * written) or giving it bad settings fails at once with a message that says why.
 */
class RoceProviderTest {
    @AfterEach
    void clearProperties() {
        System.clearProperty("jccl.roce.port");
        System.clearProperty("jccl.roce.mtu");
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
    void shouldRefuseToOpenUntilTheDataPathExists() {
        VerbsException e = assertThrows(VerbsException.class, () -> RoceProvider.device().open());
        assertEquals(VerbsException.Reason.UNSUPPORTED, e.reason());
        assertTrue(e.getMessage().contains("data path"), e.getMessage());
        assertTrue(e.getMessage().contains("4791"), e.getMessage());
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
    }
}
