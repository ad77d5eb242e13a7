package io.jccl.common;

import org.junit.jupiter.api.Test;

import java.io.IOException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class NativeAccessTest {
    @Test
    void shouldRecogniseTheJvmsDenialAnywhereInTheCauses() {
        IllegalCallerException denial = new IllegalCallerException(
            "Illegal native access from an unnamed module (file:/x/jccl-transport-shm.jar)");
        assertTrue(NativeAccess.isDenial(denial));
        assertTrue(NativeAccess.isDenial(new RuntimeException("mapping failed", new IOException("x", denial))));
        assertFalse(NativeAccess.isDenial(new IllegalCallerException("some other caller check")));
        assertFalse(NativeAccess.isDenial(new IOException("No space left on device")));
    }

    @Test
    void shouldNameTheFlagForTheClassPathAndForModules() {
        assertEquals("--enable-native-access=ALL-UNNAMED", NativeAccess.flagFor(NativeAccessTest.class.getModule()));
        assertEquals("--enable-native-access=java.base", NativeAccess.flagFor(Object.class.getModule()));
        assertTrue(NativeAccess.explain(NativeAccessTest.class.getModule())
            .contains("start java with --enable-native-access=ALL-UNNAMED"));
    }
}
