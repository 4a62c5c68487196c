//! Whether the machine runs on battery (`GetSystemPowerStatus`).

use windows_sys::Win32::System::Power::{GetSystemPowerStatus, SYSTEM_POWER_STATUS};

/// `ACLineStatus` when the machine runs on battery (1 is online, 255 unknown).
const AC_OFFLINE: u8 = 0;
/// `BatteryFlag` when the machine has no battery (128); 255 is unknown.
const NO_SYSTEM_BATTERY: u8 = 128;

/// The machine's power source as Windows reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerStatus {
    /// `ACLineStatus`: 0 offline, 1 online, 255 unknown.
    pub ac_line: u8,
    /// `BatteryFlag`: bits of high, low, critical, charging; 128 no battery.
    pub battery_flag: u8,
}

impl PowerStatus {
    /// On battery: a battery is there and mains power is known to be off.
    /// An unknown line status (255) counts as mains, as a desktop's does.
    pub fn on_battery(self) -> bool {
        self.ac_line == AC_OFFLINE && self.battery_flag != NO_SYSTEM_BATTERY
    }
}

/// The power status now, or `None` when Windows cannot say.
pub fn status() -> Option<PowerStatus> {
    let mut s = SYSTEM_POWER_STATUS {
        ACLineStatus: 0,
        BatteryFlag: 0,
        BatteryLifePercent: 0,
        SystemStatusFlag: 0,
        BatteryLifeTime: 0,
        BatteryFullLifeTime: 0,
    };
    // SAFETY: `s` is a valid, writable SYSTEM_POWER_STATUS owned here; the
    // call only writes into it.
    let ok = unsafe { GetSystemPowerStatus(&mut s) };
    (ok != 0).then_some(PowerStatus {
        ac_line: s.ACLineStatus,
        battery_flag: s.BatteryFlag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn battery_only_when_a_battery_runs_without_mains() {
        let s = |ac_line, battery_flag| PowerStatus {
            ac_line,
            battery_flag,
        };
        assert!(s(0, 1).on_battery(), "high charge, unplugged");
        assert!(s(0, 8 | 2).on_battery(), "charging flag stale, unplugged");
        assert!(!s(1, 8).on_battery(), "plugged in, charging");
        assert!(!s(0, 128).on_battery(), "no battery");
        assert!(!s(255, 1).on_battery(), "line status unknown");
    }

    #[test]
    fn the_status_is_read() {
        assert!(status().is_some(), "GetSystemPowerStatus failed");
    }
}
