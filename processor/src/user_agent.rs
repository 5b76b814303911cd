//! What a user-agent string claims: engine, OS, browser version, mobile. The consistency signals
//! compare these claims with what the runtime itself reports (client hints, `navigator.platform`,
//! `productSub`, `eval` length, the error-stack engine), so the parser only needs the coarse
//! facts every browser's UA carries, not a full device database.

use serde::Serialize;

/// The rendering engine a user agent claims. On iOS every browser is WebKit, whatever its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    Blink,
    Gecko,
    WebKit,
    Unknown,
}

/// The operating system a user agent claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Os {
    Windows,
    MacOs,
    Ios,
    Android,
    ChromeOs,
    Linux,
    Unknown,
}

/// The coarse claims of a user-agent string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClaimedBrowser {
    pub engine: Engine,
    pub os: Os,
    /// The Chromium major version for Blink, the browser's own major version otherwise.
    pub major: Option<u32>,
    /// A phone-class device (the `Mobile` token, iPhone, iPod).
    pub mobile: bool,
    /// Which Chromium brand the UA names, so the client-hint brands can be checked against it.
    pub chromium_brand: Option<ChromiumBrand>,
}

impl ClaimedBrowser {
    /// A desktop or laptop claim: not a phone, not Android or iOS.
    pub fn is_desktop(&self) -> bool {
        !self.mobile && !matches!(self.os, Os::Android | Os::Ios)
    }
}

/// Chromium-based browsers that name themselves in both the UA and the client-hint brands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChromiumBrand {
    Edge,
    Opera,
}

impl ChromiumBrand {
    /// The brand string client hints carry for this browser.
    pub fn hint_brand(self) -> &'static str {
        match self {
            Self::Edge => "Microsoft Edge",
            Self::Opera => "Opera",
        }
    }
}

/// Parses the claims of a user-agent string.
pub fn parse(user_agent: &str) -> ClaimedBrowser {
    let os = parse_os(user_agent);
    let engine = if os == Os::Ios {
        Engine::WebKit
    } else if user_agent.contains("Firefox/") {
        Engine::Gecko
    } else if user_agent.contains("Chrome/") || user_agent.contains("Chromium/") {
        Engine::Blink
    } else if user_agent.contains("AppleWebKit/") && user_agent.contains("Safari/") {
        Engine::WebKit
    } else {
        Engine::Unknown
    };
    let version_token = match engine {
        Engine::Blink => ["Chrome/", "Chromium/"]
            .iter()
            .find_map(|t| major_after(user_agent, t)),
        Engine::Gecko => major_after(user_agent, "Firefox/"),
        Engine::WebKit => ["Version/", "CriOS/", "FxiOS/", "EdgiOS/"]
            .iter()
            .find_map(|t| major_after(user_agent, t)),
        Engine::Unknown => None,
    };
    let chromium_brand = if engine != Engine::Blink {
        None
    } else if user_agent.contains("Edg/") {
        Some(ChromiumBrand::Edge)
    } else if user_agent.contains("OPR/") {
        Some(ChromiumBrand::Opera)
    } else {
        None
    };
    let mobile = user_agent.contains("iPhone")
        || user_agent.contains("iPod")
        || (user_agent.contains("Mobile") && matches!(os, Os::Android | Os::Ios));
    ClaimedBrowser {
        engine,
        os,
        major: version_token,
        mobile,
        chromium_brand,
    }
}

fn parse_os(user_agent: &str) -> Os {
    // Order matters: iOS UAs say "like Mac OS X", Android UAs say "Linux".
    if ["iPhone", "iPad", "iPod"]
        .iter()
        .any(|t| user_agent.contains(t))
    {
        Os::Ios
    } else if user_agent.contains("Android") {
        Os::Android
    } else if user_agent.contains("CrOS") {
        Os::ChromeOs
    } else if user_agent.contains("Windows") {
        Os::Windows
    } else if user_agent.contains("Macintosh") || user_agent.contains("Mac OS X") {
        Os::MacOs
    } else if user_agent.contains("Linux") || user_agent.contains("X11") {
        Os::Linux
    } else {
        Os::Unknown
    }
}

fn major_after(haystack: &str, token: &str) -> Option<u32> {
    let start = haystack.find(token)? + token.len();
    let digits: String = haystack[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .take(6)
        .collect();
    digits.parse().ok()
}

/// The OS family `navigator.platform` names, or `None` when it says nothing usable.
/// "Linux ..." is shared by desktop Linux, Android and ChromeOS, so it maps to [`Os::Linux`] and
/// [`platform_fits`] accepts it for all three.
pub fn platform_os(platform: &str) -> Option<Os> {
    let platform = platform.trim();
    if platform.starts_with("Win") {
        Some(Os::Windows)
    } else if platform.starts_with("Mac") {
        Some(Os::MacOs)
    } else if ["iPhone", "iPad", "iPod"]
        .iter()
        .any(|p| platform.starts_with(p))
    {
        Some(Os::Ios)
    } else if platform.starts_with("Linux") || platform.starts_with("Android") {
        Some(Os::Linux)
    } else if platform.contains("CrOS") {
        Some(Os::ChromeOs)
    } else {
        None
    }
}

/// Whether `navigator.platform` is one the claimed OS produces. An iPad in desktop mode reports
/// "MacIntel", so iPad UAs accept it; an iPhone never does.
pub fn platform_fits(claimed: Os, platform: &str, user_agent: &str) -> bool {
    let Some(reported) = platform_os(platform) else {
        return true;
    };
    match claimed {
        Os::Unknown => true,
        Os::Android | Os::ChromeOs | Os::Linux => {
            matches!(reported, Os::Linux | Os::ChromeOs)
        }
        Os::Ios => reported == Os::Ios || (reported == Os::MacOs && user_agent.contains("iPad")),
        other => reported == other,
    }
}

/// The OS a client-hints `platform` names, or `None` when it is empty or unrecognised.
pub fn hint_platform_os(platform: &str) -> Option<Os> {
    match platform.trim() {
        "Windows" => Some(Os::Windows),
        "macOS" => Some(Os::MacOs),
        "Linux" => Some(Os::Linux),
        "Android" => Some(Os::Android),
        "Chrome OS" | "Chromium OS" => Some(Os::ChromeOs),
        "iOS" => Some(Os::Ios),
        _ => None,
    }
}

/// Known automation tools that name themselves in a UA or `appVersion`. Each names the signal
/// it feeds, so a trace seen in the UA and in a global feeds the same signal once.
pub const UA_TRACES: &[(&str, &str)] = &[
    ("Headless", "headless_user_agent"),
    ("PhantomJS", "phantomjs"),
    ("Electron/", "electron"),
    ("Nightmare", "nightmare"),
    ("Selenium", "selenium"),
    ("puppeteer", "puppeteer_playwright"),
    ("Puppeteer", "puppeteer_playwright"),
    ("playwright", "puppeteer_playwright"),
    ("Playwright", "puppeteer_playwright"),
    ("SlimerJS", "automation_user_agent"),
    ("HtmlUnit", "automation_user_agent"),
    ("CefSharp", "automation_user_agent"),
    ("Awesomium", "automation_user_agent"),
    ("Sequentum", "automation_user_agent"),
    ("WebdriverIO", "automation_user_agent"),
];

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME_WIN: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
    const SAFARI_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
    const CHROME_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/124.0.6367.88 Mobile/15E148 Safari/604.1";
    const FIREFOX_LINUX: &str =
        "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0";
    const EDGE_MAC: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80";
    const CHROME_ANDROID: &str = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36";

    #[test]
    fn parses_the_claims_of_common_browsers() {
        let chrome = parse(CHROME_WIN);
        assert_eq!(
            (chrome.engine, chrome.os, chrome.major, chrome.mobile),
            (Engine::Blink, Os::Windows, Some(124), false)
        );
        let safari = parse(SAFARI_IPHONE);
        assert_eq!(
            (safari.engine, safari.os, safari.major, safari.mobile),
            (Engine::WebKit, Os::Ios, Some(17), true)
        );
        assert_eq!(parse(CHROME_IPHONE).engine, Engine::WebKit);
        let firefox = parse(FIREFOX_LINUX);
        assert_eq!(
            (firefox.engine, firefox.os, firefox.major),
            (Engine::Gecko, Os::Linux, Some(125))
        );
        assert_eq!(parse(EDGE_MAC).chromium_brand, Some(ChromiumBrand::Edge));
        let android = parse(CHROME_ANDROID);
        assert_eq!((android.os, android.mobile), (Os::Android, true));
        assert_eq!(parse("curl/8.5.0").engine, Engine::Unknown);
    }

    #[test]
    fn platform_fits_the_claimed_os() {
        assert!(platform_fits(Os::Windows, "Win32", CHROME_WIN));
        assert!(!platform_fits(Os::Windows, "Linux x86_64", CHROME_WIN));
        assert!(platform_fits(Os::Android, "Linux armv8l", CHROME_ANDROID));
        assert!(!platform_fits(Os::Ios, "MacIntel", SAFARI_IPHONE));
        assert!(platform_fits(Os::Ios, "iPhone", SAFARI_IPHONE));
        assert!(platform_fits(Os::MacOs, "", EDGE_MAC));
    }
}
