//! The backend's own methods: reachability and the store's settings.

use super::*;

pub async fn ping_answers(store: Store) {
    store.ping().await.expect("ping");
}

pub async fn settings_put_if_absent(store: Store) {
    let name = unique("setting");
    assert_eq!(store.get_setting(&name).await.unwrap(), None);
    let first = [0u8, 1, 2, 0xff, 0xfe];
    assert!(store.put_setting_if_absent(&name, &first).await.unwrap());
    assert_eq!(
        store.get_setting(&name).await.unwrap().as_deref(),
        Some(&first[..])
    );
    assert!(
        !store.put_setting_if_absent(&name, b"second").await.unwrap(),
        "a set setting was overwritten"
    );
    assert_eq!(
        store.get_setting(&name).await.unwrap().as_deref(),
        Some(&first[..])
    );
    assert_eq!(store.get_setting(&unique("setting")).await.unwrap(), None);
}

pub async fn concurrent_setting_puts_have_one_winner(store: Store) {
    let name = unique("raced-setting");
    let results = race(8, |i| {
        let store = store.clone();
        let name = name.clone();
        async move {
            (
                i,
                store
                    .put_setting_if_absent(&name, format!("value {i}").as_bytes())
                    .await
                    .unwrap(),
            )
        }
    })
    .await;

    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, set)| *set)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one put may set a setting: {results:?}"
    );
    let expected = format!("value {}", winners[0]).into_bytes();
    assert_eq!(store.get_setting(&name).await.unwrap(), Some(expected));
}
