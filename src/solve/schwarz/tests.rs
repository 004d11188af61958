use super::*;

#[test]
fn settings_parse_and_print() {
    let s: SchwarzSettings = "ras:subdomains=8:overlap=2:fill=1:nested=4"
        .parse()
        .unwrap();
    assert_eq!(s.subdomains, 8);
    assert_eq!(s.overlap, 2);
    assert_eq!(s.fill_level, 1);
    assert_eq!(s.nested, 4);
    assert_eq!(s.to_string().parse::<SchwarzSettings>().unwrap(), s);
    crate::test_support::assert_parse_refused::<SchwarzSettings>(&[
        ("as:fill=1", "IC(0)"),
        ("ras:bogus=1", "unknown"),
    ]);
    assert!("ras:subdomains=0".parse::<SchwarzSettings>().is_err());
}

#[test]
fn membership_and_grow() {
    assert_eq!(
        membership(&[1, 3, 5, 7], &[3, 7, 9]),
        vec![false, true, false, true]
    );
    // Path 0-1-2-3-4: {2} grown by one layer is {1, 2, 3}.
    let g = Graph::from_lists(vec![vec![1], vec![0, 2], vec![1, 3], vec![2, 4], vec![3]]).unwrap();
    let mut mark = vec![u32::MAX; 5];
    assert_eq!(grow(&g, &[2], 1, &mut mark), vec![1, 2, 3]);
    assert_eq!(grow(&g, &[0], 3, &mut mark), vec![0, 1, 2, 3]);
    assert!(mark.iter().all(|&m| m == u32::MAX));
}
